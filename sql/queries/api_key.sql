-- name: api_key_insert
-- Store a new key's digest. $1 = workspace, $2 = member, $3 = sha256 digest, $4 = last-4 hint.
INSERT INTO api_key (workspace_id, member_id, digest, hint) VALUES ($1, $2, $3, $4)
RETURNING id, created_at;

-- name: api_key_authenticate
-- Resolve a key digest $1 to its live member, stamping last use (at most once a minute per key, so a
-- busy client does not turn every read into a write).
WITH hit AS (
    SELECT k.id AS key_id, k.last_used_at, m.id AS member_id, m.workspace_id, m.role, m.name
    FROM api_key k JOIN member m ON m.id = k.member_id
    WHERE k.digest = $1 AND k.revoked_at IS NULL AND m.disabled_at IS NULL
), touch AS (
    UPDATE api_key SET last_used_at = now()
    WHERE id = (SELECT key_id FROM hit)
      AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
)
SELECT key_id, member_id, workspace_id, role, name FROM hit;

-- name: api_key_revoke
-- Revoke key $2 of workspace $1. Returns the key if it was live.
UPDATE api_key SET revoked_at = now()
WHERE workspace_id = $1 AND id = $2 AND revoked_at IS NULL
RETURNING id, member_id;

-- name: api_key_get
-- One key of workspace $1 by id $2 (never its digest), with its member's role (who may manage it).
SELECT k.id, k.workspace_id, k.member_id, k.hint, k.created_at, k.last_used_at, k.revoked_at,
       m.role AS member_role
FROM api_key k JOIN member m ON m.id = k.member_id
WHERE k.workspace_id = $1 AND k.id = $2;

-- name: api_key_list
-- Keys of workspace $1 the caller may see: member $5's own, and those of members whose role is in $6
-- (text[]). Only member $2's when set (nullable), after cursor id $3 (nullable), $4 at most.
SELECT k.id, k.workspace_id, k.member_id, k.hint, k.created_at, k.last_used_at, k.revoked_at
FROM api_key k JOIN member m ON m.id = k.member_id
WHERE k.workspace_id = $1 AND ($2::uuid IS NULL OR k.member_id = $2) AND ($3::uuid IS NULL OR k.id > $3)
  AND (k.member_id = $5 OR m.role = ANY($6::text[]))
ORDER BY k.id
LIMIT $4;
