-- name: notification_emit
-- Raise event $2 with data $3 in workspace $1: one queued notification per channel of the workspace that
-- hears the event, in the caller's transaction. Returns the new notification ids (none: no such channel).
INSERT INTO notification (workspace_id, channel_id, event, payload)
SELECT c.workspace_id, c.id, $2::text, $3::jsonb
FROM notification_channel c
WHERE c.workspace_id = $1 AND $2::text = ANY (c.events)
RETURNING id;

-- name: notification_ping
-- A 'ping' notification to channel $2 of workspace $1 alone (whatever events it hears), data $3.
-- Returns its id; none if there is no such channel in that workspace.
INSERT INTO notification (workspace_id, channel_id, event, payload)
SELECT c.workspace_id, c.id, 'ping', $3::jsonb
FROM notification_channel c
WHERE c.workspace_id = $1 AND c.id = $2
RETURNING id;

-- name: notification_claim
-- Lease up to $1 notifications to send: queued ones that are due, and ones whose sender's lease ended
-- (a crashed sender) before $3 (clock override, nullable = now()). Each gets the next attempt and a fresh
-- lease token for $2 seconds, so a late write of an earlier holder changes nothing. SKIP LOCKED: each row
-- goes to one sender. Returns what a send needs: the event, its data, the channel's URL and sealed secret.
WITH due AS (
    SELECT id FROM notification
    WHERE (status = 'queued' AND available_at <= coalesce($3::timestamptz, now()))
       OR (status = 'sending' AND lease_expires_at < coalesce($3::timestamptz, now()))
    ORDER BY available_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE notification n
SET status = 'sending', attempt = n.attempt + 1, lease_token = gen_random_uuid(),
    lease_expires_at = now() + make_interval(secs => $2), updated_at = now()
FROM due, notification_channel c
WHERE n.id = due.id AND c.id = n.channel_id
RETURNING n.id, n.workspace_id, n.channel_id, n.event, n.payload, n.attempt, n.lease_token, n.created_at,
          c.url, c.signing_secret_ct;

-- name: notification_record
-- The outcome of a send of notification $1 under lease token $2: $3 = 'sent', 'failed' (for good) or
-- 'queued' (again after $6 seconds); $4 = the receiver's HTTP status (nullable), $5 = the error (nullable).
-- Guarded by the token: zero rows means the lease was lost (expired and taken over, or the channel deleted).
UPDATE notification
SET status = $3, response_status = $4, last_error = $5,
    available_at = CASE WHEN $3 = 'queued' THEN now() + make_interval(secs => $6) ELSE available_at END,
    lease_token = NULL, lease_expires_at = NULL,
    finished_at = CASE WHEN $3 IN ('sent', 'failed') THEN now() END, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'sending'
RETURNING id, status;

-- name: notification_delete_finished
-- Retention: delete up to $2 notifications sent or failed before $1. Returns how many were deleted.
WITH gone AS (
    DELETE FROM notification
    WHERE id IN (SELECT id FROM notification
                 WHERE status IN ('sent', 'failed') AND finished_at < $1
                 ORDER BY finished_at
                 LIMIT $2)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;
