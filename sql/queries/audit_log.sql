-- name: audit_insert
-- Append one audit entry. $1 = workspace (nullable), $2 = action (CLAIM, EXPIRE, …), $3 = actor type,
-- $4 = actor id, $5 = subject type, $6 = subject id, $7 = detail (jsonb).
INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, at;

-- name: audit_list
-- Audit entries of workspace $1, newest first. Filters (nullable): $2 = subject id, $3 = action,
-- $4 = cursor (last id seen). $5 = at most.
SELECT * FROM audit_log
WHERE workspace_id = $1 AND ($2::text IS NULL OR subject_id = $2) AND ($3::text IS NULL OR action = $3)
  AND ($4::bigint IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5;
