
-- name: delivery_list
-- Deliveries of workspace $1, newest first. Filters (nullable): $2 = trigger, $3 = status,
-- $4 = cursor (last id seen). $5 = at most. The body is left out of lists.
SELECT id, workspace_id, trigger_id, autopilot_id, received_at, content_type, provider, event, dedupe_key,
       dedupe_source, signature_status, status, attempt_count, dispatch_attempts, reason_code, reason,
       response_status, run_id, replayed_from_delivery_id, updated_at
FROM webhook_delivery
WHERE workspace_id = $1 AND ($2::uuid IS NULL OR trigger_id = $2) AND ($3::text IS NULL OR status = $3)
  AND ($4::uuid IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5;

-- name: delivery_get
-- One delivery of workspace $1 by id $2, with its stored body and selected headers.
SELECT * FROM webhook_delivery WHERE workspace_id = $1 AND id = $2;

-- name: delivery_insert_replay
-- A replay of delivery $1: a NEW queued delivery with the same body, headers and envelope, no dedupe key
-- (a replay must never collide with the original), linked by replayed_from_delivery_id. $2 = status
-- ('queued', or 'ignored' when the trigger no longer admits it), $3 = reason code, $4 = reason.
INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, body, content_type, headers, envelope,
                              provider, event, signature_status, status, reason_code, reason,
                              replayed_from_delivery_id)
SELECT workspace_id, trigger_id, autopilot_id, body, content_type, headers, envelope,
       provider, event, signature_status, $2, $3, $4, id
FROM webhook_delivery WHERE id = $1
RETURNING *;

-- name: delivery_set_run
-- Link delivery $1 to the run admitted for it, $2. $3 = delivery status: 'queued' (a pending run for the
-- worker to dispatch) or 'dispatched' (the run was skipped: nothing is left to do), $4 = its reason code.
UPDATE webhook_delivery SET run_id = $2, status = $3, reason_code = $4, updated_at = now() WHERE id = $1
RETURNING id;
