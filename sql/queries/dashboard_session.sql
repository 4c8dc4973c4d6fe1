-- name: dashboard_session_insert
-- A login's session: $1 = SHA-256 of the session id (the cookie holds the id, never stored), $2 = the API key
-- that logged in, $3 = lifetime in seconds.
INSERT INTO dashboard_session (digest, key_id, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3));

-- name: dashboard_session_principal
-- The live member behind an unexpired session; $1 = SHA-256 of the session id. No row once the session was
-- logged out or expired, its key revoked or its member disabled.
SELECT k.id AS key_id, m.id AS member_id, m.workspace_id, m.role, m.name
FROM dashboard_session s
JOIN api_key k ON k.id = s.key_id
JOIN member m ON m.id = k.member_id
WHERE s.digest = $1 AND s.expires_at > now() AND k.revoked_at IS NULL AND m.disabled_at IS NULL;

-- name: dashboard_session_delete
-- Logout: the session with digest $1 ends at once, on every gateway process.
DELETE FROM dashboard_session WHERE digest = $1;

-- name: dashboard_session_delete_expired
-- Retention: delete up to $2 sessions expired at $1 (now); returns how many. An expired session finds no
-- principal, so deleting it changes no answer.
WITH gone AS (
    DELETE FROM dashboard_session
    WHERE digest IN (SELECT digest FROM dashboard_session WHERE expires_at <= $1::timestamptz
                     ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;
