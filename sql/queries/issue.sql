
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
