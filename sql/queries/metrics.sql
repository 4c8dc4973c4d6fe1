-- name: metrics_statement_timeout
-- Bound every following statement of this transaction (scrapes must never load the database); $1 = e.g. '1000ms'.
SELECT set_config('statement_timeout', $1, true)

-- name: metrics_delivery_queue
-- Queued deliveries and the age in seconds of the oldest, both from webhook_delivery_queued_idx (`dispatch_attempts
-- >= 0`, always true, is its predicate): the oldest is the first by id (UUIDv7, made at receipt, as received_at is;
-- a replay gets a new one), so one row is read from the heap, not every queued one.
SELECT (SELECT count(*) FROM webhook_delivery WHERE status = 'queued' AND dispatch_attempts >= 0)::bigint AS depth,
       coalesce(extract(epoch FROM now() - (SELECT received_at FROM webhook_delivery
                                            WHERE status = 'queued' AND dispatch_attempts >= 0
                                            ORDER BY id LIMIT 1)), 0)::float8 AS oldest_age_s

-- name: metrics_run_queue
-- Runs admitted but not yet dispatched (pending) and the age of the oldest; few rows (a partial index on pending).
SELECT count(*)::bigint AS depth,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_s
FROM autopilot_run
WHERE status = 'pending'

-- name: metrics_task_queue
-- Queued tasks per agent and the age of each agent's oldest; served by agent_task_queue_idx.
SELECT agent_id, count(*)::bigint AS depth,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_s
FROM agent_task
WHERE status = 'queued'
GROUP BY agent_id
