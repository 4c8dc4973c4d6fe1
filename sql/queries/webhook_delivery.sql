-- name: delivery_drop_bodies
-- Retention: clear the raw body of up to $2 finished deliveries (not queued) received before $1; the
-- row, its envelope and its headers stay for audit. Returns how many bodies were dropped.
WITH dropped AS (
    UPDATE webhook_delivery SET body = NULL
    WHERE id IN (SELECT id FROM webhook_delivery
                 WHERE body IS NOT NULL AND status <> 'queued' AND received_at < $1
                 ORDER BY received_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS dropped FROM dropped;
