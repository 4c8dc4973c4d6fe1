
-- name: idempotency_claim
-- Claim Idempotency-Key $2 for route $3 of workspace $1 with request digest $4. A key older than the
-- replay window is taken over. Returns a row only when this request now owns the key; a concurrent
-- request with the same key waits here until the owner commits. $5 = now override (nullable).
INSERT INTO idempotency_key (workspace_id, key, route, request_digest, created_at)
VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()))
ON CONFLICT (workspace_id, route, key) DO UPDATE
SET request_digest = EXCLUDED.request_digest, created_at = EXCLUDED.created_at,
    response_status = NULL, response_body = NULL
WHERE idempotency_key.created_at <= EXCLUDED.created_at - interval '5 minutes'
RETURNING key;

-- name: idempotency_get
-- The stored request digest and response of key $2, route $3, workspace $1.
SELECT request_digest, response_status, response_body, created_at
FROM idempotency_key WHERE workspace_id = $1 AND route = $3 AND key = $2;

-- name: idempotency_store
-- Record the response of the request that owns key $2, route $3, workspace $1 (same transaction as the
-- work). $4 = status, $5 = body.
UPDATE idempotency_key SET response_status = $4, response_body = $5
WHERE workspace_id = $1 AND key = $2 AND route = $3;
