-- name: dashboard_principal
-- The live member behind an API key id (a dashboard session names the key, never holds it); $1 = key id.
SELECT k.id AS key_id, m.id AS member_id, m.workspace_id, m.role, m.name
FROM api_key k
JOIN member m ON m.id = k.member_id
WHERE k.id = $1 AND k.revoked_at IS NULL AND m.disabled_at IS NULL

-- name: dashboard_runtimes_online
-- Pull-runtime instances of the workspace that heartbeated within the timeout; $1 = workspace, $2 = seconds.
SELECT a.id AS agent_id, a.name AS agent_name, i.instance, i.heartbeat_at
FROM agent_instance i
JOIN agent a ON a.id = i.agent_id
WHERE a.workspace_id = $1 AND a.archived_at IS NULL AND i.status = 'online'
  AND i.heartbeat_at > now() - make_interval(secs => $2)
ORDER BY a.name, i.instance
LIMIT 200

-- name: dashboard_runs_today
-- Runs of the workspace created since midnight UTC (database clock), counted by status; $1 = workspace.
SELECT status, count(*)::bigint AS n
FROM autopilot_run
WHERE workspace_id = $1 AND created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
GROUP BY status
ORDER BY status

-- name: dashboard_deliveries_today
-- Deliveries of the workspace received since midnight UTC, counted by status; $1 = workspace.
SELECT status, count(*)::bigint AS n
FROM webhook_delivery
WHERE workspace_id = $1 AND received_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
GROUP BY status
ORDER BY status

-- name: dashboard_expired_leases_today
-- EXPIRE audit entries of the workspace since midnight UTC (leases the watchdog took back); $1 = workspace.
SELECT count(*)::bigint
FROM audit_log
WHERE action = 'EXPIRE' AND workspace_id = $1
  AND at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'

-- name: dashboard_queue_by_agent
-- Queued and running tasks per agent of the workspace, with the age of the oldest queued; $1 = workspace.
SELECT a.id AS agent_id, a.name AS agent_name,
       count(*) FILTER (WHERE t.status = 'queued')::bigint AS queued,
       count(*) FILTER (WHERE t.status = 'running')::bigint AS running,
       extract(epoch FROM now() - min(t.created_at) FILTER (WHERE t.status = 'queued'))::float8 AS oldest_s
FROM agent_task t
JOIN agent a ON a.id = t.agent_id
WHERE t.workspace_id = $1 AND t.status IN ('queued', 'running')
GROUP BY a.id, a.name
ORDER BY queued DESC, a.name
LIMIT 200

-- name: dashboard_recent_failures
-- The workspace's latest failed or skipped runs and failed or rejected deliveries, with reasons; $1 = workspace.
(SELECT 'run' AS kind, r.id, r.status, r.reason_code, r.reason, r.updated_at AS at, p.title AS autopilot
 FROM autopilot_run r JOIN autopilot p ON p.id = r.autopilot_id
 WHERE r.workspace_id = $1 AND r.status IN ('failed', 'skipped')
 ORDER BY r.updated_at DESC LIMIT 20)
UNION ALL
(SELECT 'delivery', d.id, d.status, d.reason_code, d.reason, d.updated_at, p.title
 FROM webhook_delivery d JOIN autopilot p ON p.id = d.autopilot_id
 WHERE d.workspace_id = $1 AND d.status IN ('failed', 'rejected')
 ORDER BY d.id DESC LIMIT 20)
ORDER BY at DESC
LIMIT 30

-- name: dashboard_next_fires
-- The workspace's enabled schedule triggers by next fire time; $1 = workspace.
SELECT t.id, t.cron, t.timezone, t.next_fire_at, t.last_fired_at, p.title AS autopilot, p.status AS autopilot_status
FROM autopilot_trigger t
JOIN autopilot p ON p.id = t.autopilot_id
WHERE t.workspace_id = $1 AND t.kind = 'schedule' AND t.enabled AND t.deleted_at IS NULL
ORDER BY t.next_fire_at NULLS LAST
LIMIT 20

-- name: dashboard_deliveries
-- The workspace's newest deliveries (optionally of one status) with their run's status; $1 = workspace, $2 = status or NULL.
SELECT d.id, d.received_at, d.trigger_id, d.provider, d.event, d.status, d.signature_status, d.reason_code,
       d.attempt_count, d.run_id, d.replayed_from_delivery_id, r.status AS run_status, p.title AS autopilot
FROM webhook_delivery d
JOIN autopilot p ON p.id = d.autopilot_id
LEFT JOIN autopilot_run r ON r.id = d.run_id
WHERE d.workspace_id = $1 AND ($2::text IS NULL OR d.status = $2)
ORDER BY d.id DESC
LIMIT 100

-- name: dashboard_delivery_get
-- One delivery of the workspace (the whole row: the replay function takes it); $1 = workspace, $2 = id.
SELECT * FROM webhook_delivery WHERE workspace_id = $1 AND id = $2

-- name: dashboard_run_chain
-- A run of the workspace with its delivery, issue and latest task: the chain delivery → run → issue/task → result.
-- $1 = workspace, $2 = run id.
SELECT r.id, r.status, r.source, r.reason_code, r.reason, r.created_at, r.finished_at, r.planned_at,
       p.id AS autopilot_id, p.title AS autopilot, p.execution_mode,
       d.id AS delivery_id, d.event, d.status AS delivery_status, d.received_at, d.signature_status,
       i.id AS issue_id, i.title AS issue_title, i.status AS issue_status,
       t.id AS task_id, t.status AS task_status, t.attempt, t.agent_id, a.name AS agent_name, t.result, t.error,
       t.finished_at AS task_finished_at
FROM autopilot_run r
JOIN autopilot p ON p.id = r.autopilot_id
LEFT JOIN webhook_delivery d ON d.id = r.webhook_delivery_id
LEFT JOIN issue i ON i.run_id = r.id
LEFT JOIN LATERAL (SELECT * FROM agent_task WHERE run_id = r.id ORDER BY created_at DESC LIMIT 1) t ON true
LEFT JOIN agent a ON a.id = t.agent_id
WHERE r.workspace_id = $1 AND r.id = $2
