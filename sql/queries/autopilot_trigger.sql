-- name: trigger_insert_webhook
-- A webhook trigger. $1 = workspace, $2 = autopilot, $3 = token digest, $4 = token ciphertext,
-- $5 = token hint, $6 = provider preset, $7 = event filters (jsonb array), $8 = rate limit per minute,
-- $9 = publisher type, $10 = publisher member.
INSERT INTO autopilot_trigger (workspace_id, autopilot_id, kind, token_digest, token_ct, token_hint, provider,
                               event_filters, rate_limit_per_minute, published_by_type, published_by_id)
VALUES ($1, $2, 'webhook', $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING *;

-- name: trigger_insert_schedule
-- A schedule trigger. $1 = workspace, $2 = autopilot, $3 = cron, $4 = IANA zone, $5 = overlap policy,
-- $6 = first fire time (UTC), $7 = publisher type, $8 = publisher member.
INSERT INTO autopilot_trigger (workspace_id, autopilot_id, kind, cron, timezone, overlap_policy, next_fire_at,
                               published_by_type, published_by_id)
VALUES ($1, $2, 'schedule', $3, $4, $5, $6, $7, $8)
RETURNING *;

-- name: trigger_get
-- One live trigger of a workspace. $1 = workspace, $2 = trigger id.
SELECT * FROM autopilot_trigger WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL;

-- name: trigger_set_signing_secret
-- Set a webhook trigger's signing secret, keeping the old one verifying for $4 seconds (0 = no grace).
-- $1 = trigger id, $2 = new secret ciphertext (nullable: remove), $3 = its hint.
UPDATE autopilot_trigger
SET previous_secret_ct = CASE WHEN $4 > 0 THEN signing_secret_ct END,
    previous_secret_expires_at = CASE WHEN $4 > 0 AND signing_secret_ct IS NOT NULL
                                      THEN now() + make_interval(secs => $4) END,
    signing_secret_ct = $2,
    signing_secret_hint = $3,
    updated_at = now()
WHERE id = $1 AND kind = 'webhook' AND deleted_at IS NULL
RETURNING id;

-- name: trigger_list_by_autopilot
-- Live triggers of autopilot $1 after cursor id $2 (nullable), $3 at most, oldest first.
SELECT * FROM autopilot_trigger
WHERE autopilot_id = $1 AND deleted_at IS NULL AND ($2::uuid IS NULL OR id > $2)
ORDER BY id
LIMIT $3;

-- name: trigger_lock
-- Lock live trigger $1 for an edit, rotation or deletion.
SELECT * FROM autopilot_trigger WHERE id = $1 AND deleted_at IS NULL FOR UPDATE;

-- name: trigger_update_webhook
-- Edit webhook trigger $1 and re-stamp its publisher. $2 = enabled, $3 = provider, $4 = event filters,
-- $5 = rate limit per minute, $6 = publisher type, $7 = publisher member.
UPDATE autopilot_trigger
SET enabled = $2, provider = $3, event_filters = $4, rate_limit_per_minute = $5,
    published_by_type = $6, published_by_id = $7, updated_at = now()
WHERE id = $1 AND kind = 'webhook' AND deleted_at IS NULL
RETURNING *;

-- name: trigger_update_schedule
-- Edit schedule trigger $1 and re-stamp its publisher. $2 = enabled, $3 = cron, $4 = IANA zone,
-- $5 = overlap policy, $6 = next fire time (UTC), $7 = publisher type, $8 = publisher member.
UPDATE autopilot_trigger
SET enabled = $2, cron = $3, timezone = $4, overlap_policy = $5, next_fire_at = $6,
    published_by_type = $7, published_by_id = $8, updated_at = now()
WHERE id = $1 AND kind = 'schedule' AND deleted_at IS NULL
RETURNING *;

-- name: trigger_restamp_autopilot
-- An autopilot edit makes its editor the publisher of every live trigger. $1 = autopilot,
-- $2 = publisher type, $3 = publisher member. Returns the re-stamped trigger ids.
UPDATE autopilot_trigger
SET published_by_type = $2, published_by_id = $3, updated_at = now()
WHERE autopilot_id = $1 AND deleted_at IS NULL
RETURNING id, kind;

-- name: trigger_delete
-- Soft-delete trigger $1. The token digest is dropped, so the old URL answers 404 on every gateway at once.
UPDATE autopilot_trigger
SET deleted_at = now(), enabled = false, token_digest = NULL, token_ct = NULL, updated_at = now()
WHERE id = $1 AND deleted_at IS NULL
RETURNING *;

-- name: trigger_rotate_token
-- Replace webhook trigger $1's token: $2 = new digest, $3 = its ciphertext, $4 = its hint. The old
-- digest is gone once this commits, so the old URL answers 404 on every gateway process at once.
UPDATE autopilot_trigger
SET token_digest = $2, token_ct = $3, token_hint = $4, updated_at = now()
WHERE id = $1 AND kind = 'webhook' AND deleted_at IS NULL
RETURNING *;

-- name: trigger_get_including_deleted
-- One trigger of workspace $1 by id $2, deleted or not (a delivery's trigger may be gone).
SELECT * FROM autopilot_trigger WHERE workspace_id = $1 AND id = $2;

-- name: trigger_schedule_ids
-- Live schedule triggers of autopilot $1 (the schedulers are woken for each when the autopilot's status
-- changes, so a resume plans its next occurrence at once).
SELECT id FROM autopilot_trigger WHERE autopilot_id = $1 AND kind = 'schedule' AND deleted_at IS NULL;
