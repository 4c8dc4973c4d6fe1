-- name: server_ping
-- The cheapest round trip: is the database there?
SELECT 1;

-- name: server_backend_pid
-- The process id of the backend running this statement (a pooler's clients are told another one).
SELECT pg_backend_pid();

-- name: notify_send
-- Wake listeners (a hint only: every listener also polls). $1 = channel, $2 = payload (an id).
-- Channels: hookgate_deliveries (queued delivery), hookgate_runs (pending run without a delivery),
-- hookgate_tasks (a task of that id's agent may be claimable: queued, requeued, or a slot freed),
-- hookgate_triggers (a schedule trigger changed), hookgate_alerts (a notification was queued).
SELECT pg_notify($1, $2);

-- name: server_now
-- The database clock (every time decision uses it, never the app server's), or override $1 if set.
SELECT coalesce($1::timestamptz, now());

-- name: connection_learn_types
-- Prepared (never run) once per new connection, so asyncpg learns every array type the batched statements
-- take up front: it looks each one up in the catalog the first time a connection meets it, a round trip of
-- a few ms that otherwise lands on a hot statement mid-burst (measured: 21 ms for a cold connection's first
-- two batch statements, 0.7 ms warm).
SELECT $1::uuid[], $2::text[], $3::timestamptz[], $4::jsonb[], $5::bigint[], $6::bytea[], $7::integer[],
       $8::boolean[], $9::double precision[];

-- name: server_durability
-- What an acknowledged commit survives, read once at start by every process (hookgate/durability.py): this
-- session's synchronous_commit, the server's synchronous_standby_names, whether it is a standby, the standbys
-- attached in sync or quorum state now, and how many attached standbys this role may not see the state of
-- (pg_stat_replication shows it only to superusers and members of pg_read_all_stats).
SELECT current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('synchronous_standby_names') AS standby_names,
       pg_is_in_recovery() AS in_recovery,
       coalesce((SELECT array_agg(application_name ORDER BY application_name)
                 FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')), '{}') AS sync_standbys,
       (SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL) AS hidden;

-- name: server_delivery_takers
-- The sessions of this database that listen for announced deliveries (the delivery workers' LISTEN
-- connections, named `hookgate listen <pid> deliveries`), by server process id: the workers share the
-- deliveries ingress announces by name among themselves by their rank here (worker/deliveries.py, Takers).
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'hookgate listen % deliveries'
ORDER BY pid;
