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

-- name: issue_list
-- Issues of workspace $1, newest first. Filters (nullable): $2 = status, $3 = autopilot,
-- $4 = cursor (last id seen). $5 = at most.
SELECT * FROM issue
WHERE workspace_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::uuid IS NULL OR autopilot_id = $3)
  AND ($4::uuid IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5;

-- name: issue_get
-- One issue of workspace $1 by id $2.
SELECT * FROM issue WHERE workspace_id = $1 AND id = $2;

-- name: issue_update_status
-- Move issue $2 of workspace $1 to status $3. Returns the row (changed or not) and the previous status.
WITH old AS (SELECT id, status FROM issue WHERE workspace_id = $1 AND id = $2 FOR UPDATE)
UPDATE issue i SET status = $3, updated_at = CASE WHEN i.status = $3 THEN i.updated_at ELSE now() END
FROM old WHERE i.id = old.id
RETURNING i.*, old.status AS previous_status;

-- name: issue_reopen
-- A retried run's issue $1 is open again if it was cancelled (a cancelled issue is what cancelled its run);
-- an open or done issue is left as it is. Returns the issue if it was reopened.
UPDATE issue SET status = 'todo', updated_at = now() WHERE id = $1 AND status = 'cancelled'
RETURNING id;
