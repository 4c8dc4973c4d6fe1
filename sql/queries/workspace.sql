-- name: workspace_get_or_create
-- Bootstrap: the workspace named $1, created if missing. Returns id and whether it was created.
WITH ins AS (
    INSERT INTO workspace (name) VALUES ($1)
    ON CONFLICT (name) DO NOTHING
    RETURNING id, true AS created
)
SELECT id, created FROM ins
UNION ALL
SELECT id, false FROM workspace WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM ins);

-- name: workspace_count
-- How many workspaces exist (serve bootstraps one on an empty database).
SELECT count(*) FROM workspace;

-- name: workspace_first_owner
-- The oldest active owner of workspace $1: the accountable member of last resort (ARCHITECTURE §6).
SELECT id FROM member
WHERE workspace_id = $1 AND role = 'owner' AND disabled_at IS NULL
ORDER BY created_at, id
LIMIT 1;
