-- name: partition_ensure
-- Create the partitions due ahead of $1 (NULL: now) for webhook_delivery, task_attempt and audit_log; their names.
SELECT name FROM hookgate_partitions_ensure(coalesce($1::timestamptz, now())) AS name;

-- name: partition_expired
-- The partitions retention drops at $1, with the statements that detach and drop each. Retention per table,
-- NULL to keep forever: $2 = deliveries, $3 = task attempts, $4 = audit log (intervals).
SELECT parent, partition_name, upper_at, lower_id, upper_id, detach_sql, drop_sql
FROM hookgate_partitions_expired($1, $2, $3, $4);

-- name: partition_dedupe_release
-- Release the dedupe keys held by deliveries whose id is in [$1, $2) ($1 NULL: from the first), the range of
-- a delivery partition about to be dropped. Returns how many.
WITH gone AS (
    DELETE FROM webhook_delivery_dedupe
    WHERE delivery_id < $2 AND ($1::uuid IS NULL OR delivery_id >= $1)
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: partition_lock_timeout
-- Set lock_timeout to $1 (text, e.g. '100ms'; NULL: back to the session's default) for this session ($2 false)
-- or this transaction ($2 true), so that a partition change gives up instead of making traffic queue behind
-- the lock it waits for.
SELECT set_config('lock_timeout', $1, $2);
