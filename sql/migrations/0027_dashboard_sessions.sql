-- 0027_dashboard_sessions: dashboard sessions live in the database, so logging out ends one at once.
--
-- The session cookie was only signed: logging out deleted it from the browser, and a copy of it kept working
-- until it expired 12 hours later. Now each login adds a row, keyed by the SHA-256 of the session's random id
-- (the cookie holds the id, the database only its digest, like API keys), every dashboard request looks its
-- row up (one index lookup joined to the key and member, as before), and logout deletes it. Every gateway
-- process sees the deletion at its next request. The hourly retention job deletes expired rows.
CREATE TABLE dashboard_session (
    digest      bytea PRIMARY KEY CHECK (length(digest) = 32),
    key_id      uuid NOT NULL REFERENCES api_key(id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX dashboard_session_expires_idx ON dashboard_session (expires_at);
