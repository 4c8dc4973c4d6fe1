-- name: rejection_spikes_raise
-- Triggers with at least $3 deliveries rejected for their signature (not for a full workspace queue: that is
-- load, not a misconfiguration) in the $2 seconds up to $1, whose last spike was raised at
-- least $2 seconds before $1: their spike is recorded as raised at $1 and they are returned (with the count).
-- The guarded upsert makes concurrent runs (several schedulers, a restart) raise each spike once.
WITH counts AS (
    SELECT d.trigger_id, count(*) AS rejected
    FROM webhook_delivery d
    WHERE d.status = 'rejected' AND d.reason_code IS DISTINCT FROM 'workspace_queue_full'
      AND d.received_at > $1::timestamptz - make_interval(secs => $2)
      AND d.received_at <= $1::timestamptz
    GROUP BY d.trigger_id
    HAVING count(*) >= $3::bigint
), raised AS (
    INSERT INTO trigger_rejection_alert AS a (trigger_id, raised_at)
    SELECT trigger_id, $1::timestamptz FROM counts
    ON CONFLICT (trigger_id) DO UPDATE SET raised_at = EXCLUDED.raised_at
    WHERE a.raised_at <= EXCLUDED.raised_at - make_interval(secs => $2)
    RETURNING a.trigger_id
)
SELECT t.id AS trigger_id, t.workspace_id, t.autopilot_id, t.provider, counts.rejected
FROM raised
JOIN counts ON counts.trigger_id = raised.trigger_id
JOIN autopilot_trigger t ON t.id = raised.trigger_id
ORDER BY t.id;
