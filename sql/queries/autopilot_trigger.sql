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

-- name: trigger_pace_take
-- Take up to $2 dispatch slots from trigger $1's pacing window ($3 per minute). $4 = clock override
-- (nullable). Returns how many were granted and when the window ends.
SELECT granted, window_end FROM hookgate_pace_take($1, $2, $3, coalesce($4::timestamptz, now()));
