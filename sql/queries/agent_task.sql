
-- name: task_list
-- Tasks of workspace $1, newest first. Filters (nullable): $2 = agent, $3 = status, $4 = run,
-- $5 = cursor (last id seen). $6 = at most. Lease tokens are never listed.
SELECT id, workspace_id, run_id, issue_id, agent_id, payload, status, attempt, max_attempts, lease_expires_at,
       holder_instance, available_at, result, error, retry_class, created_at, updated_at, started_at, finished_at
FROM agent_task
WHERE workspace_id = $1 AND ($2::uuid IS NULL OR agent_id = $2) AND ($3::text IS NULL OR status = $3)
  AND ($4::uuid IS NULL OR run_id = $4) AND ($5::uuid IS NULL OR id < $5)
ORDER BY id DESC
LIMIT $6;

-- name: task_get
-- One task of workspace $1 by id $2 (without its lease token).
SELECT id, workspace_id, run_id, issue_id, agent_id, payload, status, attempt, max_attempts, lease_expires_at,
       holder_instance, available_at, result, error, retry_class, created_at, updated_at, started_at, finished_at
FROM agent_task WHERE workspace_id = $1 AND id = $2;

-- name: task_cancel_queued_for_run
-- A cancelled run's tasks that no worker holds yet are cancelled too. $1 = run. A running task ends
-- through its holder's report (DESIGN §7 P5), never here.
UPDATE agent_task SET status = 'cancelled', finished_at = now(), updated_at = now()
WHERE run_id = $1 AND status = 'queued'
RETURNING id;
