-- name: autopilot_insert
-- A new, active autopilot. $1 = workspace, $2 = title, $3 = instructions, $4 = assignee type,
-- $5 = assignee id, $6 = execution mode, $7 = issue title template (nullable), $8 = creator,
-- $9 = run timeout in seconds (nullable: none).
INSERT INTO autopilot (workspace_id, title, instructions, assignee_type, assignee_id, execution_mode,
                       issue_title_template, created_by, run_timeout_s)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING *;

-- name: autopilot_get
-- One autopilot of a workspace. $1 = workspace, $2 = autopilot id.
SELECT * FROM autopilot WHERE workspace_id = $1 AND id = $2;

-- name: autopilot_set_status
-- Pause, resume or archive. $1 = autopilot id, $2 = new status. Returns the row if it changed. Resuming
-- (back to 'active') restarts the auto-pause failure window: only runs created after it count.
UPDATE autopilot
SET status = $2, updated_at = now(),
    failure_window_since = CASE WHEN $2 = 'active' THEN now() ELSE failure_window_since END
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

-- name: autopilot_list
-- Autopilots of workspace $1, only status $2 when set (nullable), after cursor id $3 (nullable), $4 at most.
SELECT * FROM autopilot
WHERE workspace_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::uuid IS NULL OR id > $3)
ORDER BY id
LIMIT $4;

-- name: autopilot_update
-- Replace the editable fields of autopilot $1 (the caller merged the patch). $2 = title,
-- $3 = instructions, $4 = assignee type, $5 = assignee id, $6 = execution mode, $7 = issue title template,
-- $8 = run timeout in seconds (nullable).
UPDATE autopilot
SET title = $2, instructions = $3, assignee_type = $4, assignee_id = $5, execution_mode = $6,
    issue_title_template = $7, run_timeout_s = $8, updated_at = now()
WHERE id = $1
RETURNING *;

-- name: autopilot_lock
-- Lock autopilot $1 for a change (serialises edits, status changes and their rule versions).
SELECT * FROM autopilot WHERE id = $1 FOR UPDATE;

-- name: rule_version_list
-- Rule versions of autopilot $1 after cursor id $2 (nullable), $3 at most, oldest first.
SELECT * FROM autopilot_rule_version
WHERE autopilot_id = $1 AND ($2::uuid IS NULL OR id > $2)
ORDER BY id
LIMIT $3;

-- name: collaborator_insert
-- Give member $2 write access to autopilot $1; $3 = who added them. Returns nothing if already there.
INSERT INTO autopilot_collaborator (autopilot_id, member_id, added_by) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING
RETURNING autopilot_id, member_id, added_by, added_at;

-- name: collaborator_delete
-- Remove member $2 from autopilot $1's collaborators. Returns the row if it existed.
DELETE FROM autopilot_collaborator WHERE autopilot_id = $1 AND member_id = $2
RETURNING autopilot_id, member_id;

-- name: collaborator_list
-- Collaborators of autopilot $1 after cursor member id $2 (nullable), $3 at most.
SELECT c.autopilot_id, c.member_id, c.added_by, c.added_at, m.name, m.role
FROM autopilot_collaborator c JOIN member m ON m.id = c.member_id
WHERE c.autopilot_id = $1 AND ($2::uuid IS NULL OR c.member_id > $2)
ORDER BY c.member_id
LIMIT $3;

-- name: collaborator_exists
-- Whether member $2 is a collaborator of autopilot $1.
SELECT EXISTS (SELECT 1 FROM autopilot_collaborator WHERE autopilot_id = $1 AND member_id = $2);
