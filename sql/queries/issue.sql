-- name: issue_insert_for_run
-- The issue of a create_issue run, at most one per run. $1 workspace, $2 autopilot, $3 run, $4 title,
-- $5 body, $6 assignee type, $7 assignee id. Returns nothing if the run already has its issue.
INSERT INTO issue (workspace_id, autopilot_id, run_id, title, body, assignee_type, assignee_id)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (run_id) DO NOTHING
RETURNING id;

-- name: issue_get_by_run
-- The issue made for run $1, if any.
SELECT id, status FROM issue WHERE run_id = $1;

-- name: issue_set_status
-- Move issue $1 to status $2. Returns the issue with its run.
UPDATE issue SET status = $2, updated_at = now() WHERE id = $1
RETURNING id, workspace_id, run_id, status;
