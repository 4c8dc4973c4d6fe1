-- name: audit_insert
-- Append one audit entry. $1 = workspace (nullable), $2 = action (CLAIM, EXPIRE, …), $3 = actor type,
-- $4 = actor id, $5 = subject type, $6 = subject id, $7 = detail (jsonb).
INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, at;
