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

-- name: member_lock_for_change
-- Lock every owner of workspace $1 plus the members in $2 (uuid[]: the actor and the target) and return
-- them. Always in id order, so two changes never deadlock; and since every change that could leave the
-- workspace without an owner who can sign in takes these locks first, such changes run one at a time.
SELECT id, role, disabled_at
FROM member
WHERE workspace_id = $1 AND (role = 'owner' OR id = ANY($2::uuid[]))
ORDER BY id
FOR UPDATE;

-- name: member_update
-- Set member $2 of workspace $1 to role $3, disabled when $4 (keeping the first disabled_at). Returns it.
UPDATE member
SET role = $3, disabled_at = CASE WHEN $4::boolean THEN coalesce(disabled_at, now()) END
WHERE workspace_id = $1 AND id = $2
RETURNING id, workspace_id, name, email, role, created_at, disabled_at;

-- name: member_owner_can_sign_in
-- Whether workspace $1 still has an active (not disabled) owner holding a live key: the one thing no
-- change may take away, or nobody could manage the workspace through the API again.
SELECT EXISTS (
    SELECT 1 FROM member m
    WHERE m.workspace_id = $1 AND m.role = 'owner' AND m.disabled_at IS NULL
      AND EXISTS (SELECT 1 FROM api_key k WHERE k.member_id = m.id AND k.revoked_at IS NULL)
);
