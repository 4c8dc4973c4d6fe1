-- name: instance_heartbeat
-- A pull runtime instance ($1 agent, $2 instance name) says it is alive: online, heartbeat now.
INSERT INTO agent_instance (agent_id, instance) VALUES ($1, $2)
ON CONFLICT (agent_id, instance) DO UPDATE SET status = 'online', heartbeat_at = now()
RETURNING id, status, heartbeat_at;

-- name: instance_expire
-- Watchdog: instances silent for more than $1 seconds go offline. $2 = clock override (nullable).
UPDATE agent_instance SET status = 'offline'
WHERE status = 'online' AND heartbeat_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1)
RETURNING agent_id, instance;
