-- name: autopilot_insert
-- A new, active autopilot. $1 = workspace, $2 = title, $3 = instructions, $4 = assignee type,
-- $5 = assignee id, $6 = execution mode, $7 = issue title template (nullable), $8 = creator.
INSERT INTO autopilot (workspace_id, title, instructions, assignee_type, assignee_id, execution_mode,
                       issue_title_template, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING *;

-- name: autopilot_get
-- One autopilot of a workspace. $1 = workspace, $2 = autopilot id.
SELECT * FROM autopilot WHERE workspace_id = $1 AND id = $2;

-- name: autopilot_set_status
-- Pause, resume or archive. $1 = autopilot id, $2 = new status. Returns the row if it changed.
UPDATE autopilot SET status = $2, updated_at = now()
WHERE id = $1 AND status IS DISTINCT FROM $2
RETURNING *;

-- name: rule_version_insert
-- Append the next immutable rule version of autopilot $1. $2 = change kind (create, pause, …),
-- $3 = config snapshot, $4 = its digest, $5 = publisher type, $6 = publisher member (nullable).
-- The row lock on the autopilot serialises concurrent publishers, so versions never collide.
WITH locked AS (
    SELECT id FROM autopilot WHERE id = $1 FOR UPDATE
)
INSERT INTO autopilot_rule_version (autopilot_id, version, change, config, digest, publisher_type, publisher_id)
SELECT $1, coalesce((SELECT max(version) FROM autopilot_rule_version WHERE autopilot_id = $1), 0) + 1,
       $2, $3, $4, $5, $6
FROM locked
RETURNING id, version, created_at;

-- name: rule_version_current
-- The newest rule version of autopilot $1 (the active rule).
SELECT * FROM autopilot_rule_version WHERE autopilot_id = $1 ORDER BY version DESC LIMIT 1;

-- name: autopilot_get_any
-- One autopilot by id, whatever its workspace (internal use: the caller already scoped it).
SELECT * FROM autopilot WHERE id = $1;
