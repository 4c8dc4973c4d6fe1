-- name: member_insert
-- Add a member. $1 = workspace, $2 = name, $3 = email (nullable), $4 = role.
INSERT INTO member (workspace_id, name, email, role) VALUES ($1, $2, $3, $4)
RETURNING id, workspace_id, name, email, role, created_at;

-- name: member_get
-- One member of a workspace. $1 = workspace, $2 = member id.
SELECT id, workspace_id, name, email, role, created_at, disabled_at
FROM member WHERE workspace_id = $1 AND id = $2;

-- name: member_list_page
-- Members of workspace $1 after opaque cursor id $2 (nullable), $3 at most, oldest first (admin API).
SELECT id, workspace_id, name, email, role, created_at, disabled_at
FROM member
WHERE workspace_id = $1 AND ($2::uuid IS NULL OR id > $2)
ORDER BY id
LIMIT $3;
