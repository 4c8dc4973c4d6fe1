-- name: delivery_claim
-- Lease up to $1 due queued deliveries, round-robin across triggers (DESIGN §5 fairness): walk the triggers
-- that have due work in id order after cursor $3 (nullable = from the start), at most $4 of them, and take
-- their oldest rows interleaved (first of each trigger, then second of each, …). $2 = lease seconds,
-- $5 = clock override (nullable = now()). A leased row stays 'queued' with available_at = lease end, so an
-- expired lease is simply claimable again. Returns what dispatch needs, with the trigger's pacing budget.
WITH RECURSIVE heads AS (
    (SELECT d.trigger_id, 1 AS depth FROM webhook_delivery d
     WHERE d.status = 'queued' AND d.available_at <= coalesce($5::timestamptz, now())
       AND ($3::uuid IS NULL OR d.trigger_id > $3)
     ORDER BY d.trigger_id LIMIT 1)
    UNION ALL
    SELECT (SELECT d.trigger_id FROM webhook_delivery d
            WHERE d.status = 'queued' AND d.available_at <= coalesce($5::timestamptz, now())
              AND d.trigger_id > h.trigger_id
            ORDER BY d.trigger_id LIMIT 1), h.depth + 1
    FROM heads h WHERE h.trigger_id IS NOT NULL AND h.depth < $4
), locked AS (
    -- Ordered by the (trigger_id, available_at) index, so each trigger's head is read, not its whole backlog.
    SELECT x.id, x.available_at, row_number() OVER (PARTITION BY x.trigger_id ORDER BY x.available_at) AS rn
    FROM heads h CROSS JOIN LATERAL (
        SELECT d.id, d.trigger_id, d.available_at FROM webhook_delivery d
        WHERE d.trigger_id = h.trigger_id AND d.status = 'queued'
          AND d.available_at <= coalesce($5::timestamptz, now())
        ORDER BY d.available_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) x
    WHERE h.trigger_id IS NOT NULL
), picked AS (
    SELECT id FROM locked ORDER BY rn, available_at LIMIT $1
)
UPDATE webhook_delivery w
SET lease_token = gen_random_uuid(),
    lease_expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => $2),
    available_at = coalesce($5::timestamptz, now()) + make_interval(secs => $2),
    updated_at = now()
FROM picked, autopilot_trigger t
WHERE w.id = picked.id AND t.id = w.trigger_id
RETURNING w.id, w.lease_token, w.workspace_id, w.trigger_id, w.autopilot_id, w.event, w.envelope, w.run_id,
          w.dispatch_attempts, w.received_at, t.rate_limit_per_minute;

-- name: delivery_complete
-- The delivery became run $3 (dispatched). Guarded by $1 id + $2 lease token + status queued: zero rows
-- means another worker owns it now (harmless).
UPDATE webhook_delivery
SET status = 'dispatched', run_id = $3, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id;

-- name: delivery_ignore
-- Crash-window recovery found the delivery not admissible (disabled trigger, paused autopilot, filtered
-- event): mark it ignored like ingress would have. $1 id, $2 lease token, $3 reason code, $4 reason.
UPDATE webhook_delivery
SET status = 'ignored', reason_code = $3, reason = $4, lease_token = NULL, lease_expires_at = NULL,
    updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id;

-- name: delivery_retry
-- Dispatch failed: spend an attempt and come back after $3 seconds, or give up ('failed',
-- dispatch_failed) once $4 attempts are spent. $1 id, $2 lease token, $5 error text.
UPDATE webhook_delivery
SET dispatch_attempts = dispatch_attempts + 1,
    status = CASE WHEN dispatch_attempts + 1 >= $4 THEN 'failed' ELSE 'queued' END,
    reason_code = CASE WHEN dispatch_attempts + 1 >= $4 THEN 'dispatch_failed' ELSE reason_code END,
    reason = $5,
    available_at = now() + make_interval(secs => $3),
    lease_token = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id, status, dispatch_attempts;

-- name: delivery_defer
-- Per-trigger pacing: release the lease until $3 without spending an attempt. $1 id, $2 lease token.
UPDATE webhook_delivery
SET available_at = $3, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id;

-- name: delivery_release
-- Give a leased delivery back at once (graceful shutdown). $1 id, $2 lease token.
UPDATE webhook_delivery
SET available_at = now(), lease_token = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id;

-- name: delivery_admission_facts
-- What crash-window admission re-checks for trigger $1 (ingress step 9): enabled, live, autopilot status,
-- event filters.
SELECT t.enabled, t.deleted_at IS NOT NULL AS deleted, t.event_filters, a.status AS autopilot_status
FROM autopilot_trigger t JOIN autopilot a ON a.id = t.autopilot_id
WHERE t.id = $1;
