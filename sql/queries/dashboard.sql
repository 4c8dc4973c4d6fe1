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
(SELECT 'run' AS kind, r.id, r.status, r.reason_code, r.reason, r.updated_at AS at, p.title AS autopilot, p.id AS autopilot_id
 FROM autopilot_run r JOIN autopilot p ON p.id = r.autopilot_id
 WHERE r.workspace_id = $1 AND r.status IN ('failed', 'skipped')
 ORDER BY r.updated_at DESC LIMIT 20)
UNION ALL
(SELECT 'delivery', d.id, d.status, d.reason_code, d.reason, d.updated_at, p.title, p.id
 FROM webhook_delivery d JOIN autopilot p ON p.id = d.autopilot_id
 WHERE d.workspace_id = $1 AND d.status IN ('failed', 'rejected')
 ORDER BY d.id DESC LIMIT 20)
ORDER BY at DESC
LIMIT 30

-- name: dashboard_next_fires
-- The workspace's enabled schedule triggers by next fire time; $1 = workspace.
SELECT t.id, t.cron, t.timezone, t.next_fire_at, t.last_fired_at, t.autopilot_id, p.title AS autopilot,
       p.status AS autopilot_status
FROM autopilot_trigger t
JOIN autopilot p ON p.id = t.autopilot_id
WHERE t.workspace_id = $1 AND t.kind = 'schedule' AND t.enabled AND t.deleted_at IS NULL
ORDER BY t.next_fire_at NULLS LAST
LIMIT 20

-- name: dashboard_run_chain
-- A run of the workspace with its delivery and issue: the head of the timeline delivery → run → issue → task.
-- $1 = workspace, $2 = run id.
SELECT r.id, r.status, r.source, r.reason_code, r.reason, r.created_at, r.updated_at, r.finished_at,
       r.planned_at, r.trigger_id, r.originator_id, r.accountable_id,
       p.id AS autopilot_id, p.title AS autopilot, p.execution_mode,
       d.id AS delivery_id, d.event, d.status AS delivery_status, d.reason_code AS delivery_reason_code,
       d.received_at, d.signature_status,
       i.id AS issue_id, i.title AS issue_title, i.status AS issue_status, i.updated_at AS issue_updated_at
FROM autopilot_run r
JOIN autopilot p ON p.id = r.autopilot_id
LEFT JOIN webhook_delivery d ON d.id = r.webhook_delivery_id
LEFT JOIN issue i ON i.run_id = r.id
WHERE r.workspace_id = $1 AND r.id = $2

-- name: dashboard_run_tasks
-- Every task of a run of the workspace, oldest first: status, attempt, last error and lease (never its token),
-- and while one is queued for an unhealthy agent, that agent's next probe (not before now; as run_chain reads
-- it). $1 = workspace, $2 = run id.
SELECT t.id, t.status, t.attempt, t.max_attempts, t.error, t.retry_class, t.result, t.lease_expires_at,
       t.holder_instance, t.available_at, t.created_at, t.started_at, t.finished_at,
       a.id AS agent_id, a.name AS agent_name, a.runtime_kind,
       (SELECT greatest(h.next_probe_at, now()) FROM agent_health h
        WHERE h.agent_id = t.agent_id AND h.state = 'unhealthy' AND t.status = 'queued') AS agent_next_probe_at
FROM agent_task t
JOIN agent a ON a.id = t.agent_id
WHERE t.workspace_id = $1 AND t.run_id = $2
ORDER BY t.created_at, t.id
LIMIT 100

-- name: dashboard_run_attempts
-- Every attempt of every task of a run of the workspace, oldest first, with the agent's answer (a page shows it
-- to the autopilot's writers only). $1 = workspace, $2 = run id.
SELECT a.id, a.task_id, a.run_id, a.agent_id, a.attempt, a.started_at, a.finished_at, a.duration_ms, a.outcome,
       a.http_status, a.error, a.response_headers, a.response_body
FROM agent_task t
JOIN task_attempt a ON a.task_id = t.id
WHERE t.workspace_id = $1 AND t.run_id = $2
ORDER BY a.id
LIMIT 500

-- name: dashboard_delivery_search
-- The workspace's deliveries newest first, by trigger, autopilot, status, event (a LIKE pattern),
-- dedupe key and received time, without bodies; keyset paging on the id (uuid7: time-ordered).
-- $1 = workspace; nullable filters: $2 = trigger, $3 = autopilot, $4 = status, $5 = event pattern,
-- $6 = dedupe key, $7 = received at or after, $8 = received before, $9 = cursor (last id seen);
-- $10 = at most.
SELECT d.id, d.received_at, d.trigger_id, d.autopilot_id, d.provider, d.event, d.status, d.signature_status,
       d.reason_code, d.dedupe_key, d.attempt_count, d.body_mismatch_count, d.run_id,
       d.replayed_from_delivery_id, r.status AS run_status, p.title AS autopilot
FROM webhook_delivery d
JOIN autopilot p ON p.id = d.autopilot_id
LEFT JOIN autopilot_run r ON r.id = d.run_id
WHERE d.workspace_id = $1
  AND ($2::uuid IS NULL OR d.trigger_id = $2)
  AND ($3::uuid IS NULL OR d.autopilot_id = $3)
  AND ($4::text IS NULL OR d.status = $4)
  AND ($5::text IS NULL OR d.event ILIKE $5)
  AND ($6::text IS NULL OR d.dedupe_key = $6)
  AND ($7::timestamptz IS NULL OR d.received_at >= $7)
  AND ($8::timestamptz IS NULL OR d.received_at < $8)
  AND ($9::uuid IS NULL OR d.id < $9)
ORDER BY d.id DESC
LIMIT $10

-- name: dashboard_delivery_context
-- What a delivery page shows next to the row itself: its autopilot, trigger kind (and the last characters of
-- its signing secret, which a signature was checked against) and its run's status.
-- $1 = workspace, $2 = delivery id.
SELECT p.title AS autopilot, p.status AS autopilot_status, t.kind AS trigger_kind,
       t.deleted_at AS trigger_deleted_at, t.signing_secret_hint, r.status AS run_status
FROM webhook_delivery d
JOIN autopilot p ON p.id = d.autopilot_id
JOIN autopilot_trigger t ON t.id = d.trigger_id
LEFT JOIN autopilot_run r ON r.id = d.run_id
WHERE d.workspace_id = $1 AND d.id = $2

-- name: dashboard_delivery_replays
-- The replays of a delivery of the workspace, newest first; $1 = workspace, $2 = the original's id.
SELECT id, received_at, status, reason_code, run_id
FROM webhook_delivery
WHERE workspace_id = $1 AND replayed_from_delivery_id = $2
ORDER BY id DESC
LIMIT 100

-- name: dashboard_agent_health
-- Each agent of the workspace with what the data says of its health: its circuit breaker (agent_health, as
-- the admin API reads it; none: it never failed), its own retry schedule, online runtime instances (heartbeat
-- within $2 seconds), queue depth, tasks in flight, and the latest failed task's error. $1 = workspace,
-- $3 = one agent's id (NULL: all).
SELECT a.id, a.name, a.runtime_kind, a.endpoint_url, a.max_concurrency, a.archived_at, a.owner_id, a.created_at,
       a.retry_schedule, h.state AS health_state, h.since AS health_since, h.next_probe_at AS health_next_probe_at,
       h.failures AS health_failures, h.last_error AS health_last_error,
       (SELECT count(*) FROM agent_instance i
        WHERE i.agent_id = a.id AND i.status = 'online'
          AND i.heartbeat_at > now() - make_interval(secs => $2))::bigint AS online,
       (SELECT count(*) FROM agent_task t WHERE t.agent_id = a.id AND t.status = 'queued')::bigint AS queued,
       (SELECT count(*) FROM agent_task t WHERE t.agent_id = a.id AND t.status = 'running')::bigint AS in_flight,
       e.error AS last_error, e.finished_at AS last_error_at
FROM agent a
LEFT JOIN agent_health h ON h.agent_id = a.id
LEFT JOIN LATERAL (SELECT t.error, t.finished_at FROM agent_task t
                   WHERE t.agent_id = a.id AND t.status = 'failed'
                   ORDER BY t.finished_at DESC NULLS LAST LIMIT 1) e ON true
WHERE a.workspace_id = $1 AND ($3::uuid IS NULL OR a.id = $3)
ORDER BY a.archived_at NULLS FIRST, a.name, a.id
LIMIT 500

-- name: dashboard_agent_instances
-- The runtime instances of an agent of the workspace, online ones first; $1 = workspace, $2 = agent.
SELECT i.instance, i.status, i.first_seen_at, i.heartbeat_at
FROM agent_instance i
JOIN agent a ON a.id = i.agent_id
WHERE a.workspace_id = $1 AND a.id = $2
ORDER BY i.status DESC, i.heartbeat_at DESC
LIMIT 100

-- name: dashboard_agent_errors
-- The latest failed attempts of an agent of the workspace, newest first, with their task's status now: every
-- attempt that did not succeed, kept when a later attempt of its task did (task_attempt_agent_failed_idx; keep
-- the outcome list as the index's). $1 = workspace, $2 = agent.
SELECT a.id, a.task_id, a.run_id, a.attempt, a.outcome, a.http_status, a.error, a.finished_at,
       t.status AS task_status
FROM task_attempt a
JOIN agent_task t ON t.id = a.task_id
WHERE a.agent_id = $2 AND a.outcome NOT IN ('succeeded', 'accepted', 'cancelled') AND a.workspace_id = $1
ORDER BY a.id DESC
LIMIT 20

-- name: dashboard_assignee
-- An autopilot's assignee by name: the squad's name (for a squad) and the agent it resolves to (the squad's
-- leader), archived or not. $1 = workspace, $2 = assignee type ('agent' or 'squad'), $3 = assignee id.
SELECT (SELECT s.name FROM squad s WHERE $2 = 'squad' AND s.id = $3 AND s.workspace_id = $1) AS squad_name,
       ag.id AS agent_id, ag.name AS agent_name, ag.archived_at IS NOT NULL AS agent_archived
FROM hookgate_assignee_agent($2, $3, $1) ag
RIGHT JOIN (SELECT 1) one ON true

-- name: dashboard_autopilots
-- The workspace's autopilots with their live trigger counts, active first; $1 = workspace.
SELECT p.id, p.title, p.status, p.execution_mode, p.assignee_type, p.assignee_id, p.updated_at,
       count(t.id) FILTER (WHERE t.kind = 'webhook')::bigint AS webhooks,
       count(t.id) FILTER (WHERE t.kind = 'schedule')::bigint AS schedules
FROM autopilot p
LEFT JOIN autopilot_trigger t ON t.autopilot_id = p.id AND t.deleted_at IS NULL
WHERE p.workspace_id = $1
GROUP BY p.id
ORDER BY p.status = 'archived', p.title, p.id
LIMIT 500

-- name: dashboard_deliveries_per_bucket
-- The workspace's deliveries of the last 24 hours counted by outcome (status) per time bucket.
-- $1 = workspace, $2 = bucket width in seconds, $3 = now (NULL: the database clock; tests move time).
SELECT to_timestamp(floor(extract(epoch FROM received_at) / $2) * $2) AS bucket, status, count(*)::bigint AS n
FROM webhook_delivery
WHERE workspace_id = $1 AND received_at > coalesce($3::timestamptz, now()) - interval '24 hours'
  AND received_at <= coalesce($3::timestamptz, now())
GROUP BY 1, 2
ORDER BY 1, 2

-- name: dashboard_push_latency
-- Push latency of the last 24 hours per time bucket, p50 and p99 in seconds: the time from a push task's
-- start (lease taken) to its finish, for http agents. No push latency is recorded elsewhere in the
-- database, so the task rows stand in for it. $1 = workspace, $2 = bucket seconds, $3 = now (NULL: now()).
SELECT to_timestamp(floor(extract(epoch FROM t.finished_at) / $2) * $2) AS bucket,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM t.finished_at - t.started_at))::float8 AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM t.finished_at - t.started_at))::float8 AS p99,
       count(*)::bigint AS n
FROM agent_task t
JOIN agent a ON a.id = t.agent_id
WHERE t.workspace_id = $1 AND a.runtime_kind = 'http' AND t.started_at IS NOT NULL
  AND t.finished_at > coalesce($3::timestamptz, now()) - interval '24 hours'
  AND t.finished_at <= coalesce($3::timestamptz, now())
  AND t.finished_at >= t.started_at
GROUP BY 1
ORDER BY 1

-- name: dashboard_task_context
-- What a task's page names besides the task itself: its agent, its run's status and autopilot, and while the
-- task is queued for an unhealthy agent, that agent's next probe (as task_get reads it).
-- $1 = workspace, $2 = task id.
SELECT a.name AS agent_name, a.runtime_kind, r.status AS run_status, p.id AS autopilot_id, p.title AS autopilot,
       (SELECT greatest(h.next_probe_at, now()) FROM agent_health h
        WHERE h.agent_id = t.agent_id AND h.state = 'unhealthy' AND t.status = 'queued') AS agent_next_probe_at
FROM agent_task t
JOIN agent a ON a.id = t.agent_id
LEFT JOIN autopilot_run r ON r.id = t.run_id
LEFT JOIN autopilot p ON p.id = r.autopilot_id
WHERE t.workspace_id = $1 AND t.id = $2

-- name: dashboard_issue_context
-- What an issue's page names besides the issue itself: its autopilot and its run's status.
-- $1 = workspace, $2 = issue id.
SELECT p.title AS autopilot, r.status AS run_status
FROM issue i
LEFT JOIN autopilot p ON p.id = i.autopilot_id
LEFT JOIN autopilot_run r ON r.id = i.run_id
WHERE i.workspace_id = $1 AND i.id = $2

-- name: dashboard_issue_tasks
-- The tasks made for an issue of the workspace, oldest first, with their agent. $1 = workspace, $2 = issue id.
SELECT t.id, t.status, t.attempt, t.max_attempts, t.created_at, t.finished_at,
       a.id AS agent_id, a.name AS agent_name
FROM agent_task t
JOIN agent a ON a.id = t.agent_id
WHERE t.workspace_id = $1 AND t.issue_id = $2
ORDER BY t.created_at, t.id
LIMIT 100
