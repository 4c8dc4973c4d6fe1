-- name: server_ping
-- The cheapest round trip: is the database there?
SELECT 1;

-- name: notify_send
-- Wake listeners (a hint only: every listener also polls). $1 = channel, $2 = payload (an id).
-- Channels: hookgate_deliveries (queued delivery), hookgate_runs (pending run without a delivery),
-- hookgate_tasks (a task of that id's agent may be claimable: queued, requeued, or a slot freed),
-- hookgate_triggers (a schedule trigger changed).
SELECT pg_notify($1, $2);

-- name: server_now
-- The database clock (every time decision uses it, never the app server's), or override $1 if set.
SELECT coalesce($1::timestamptz, now());
