-- name: idempotency_claim
-- Claim Idempotency-Key $5 of API key $2 for method $3 and route $4 of workspace $1, with request digest
-- $6. A key older than the replay window is taken over. Returns a row only when this request now owns the
-- key; a concurrent request with the same key waits here until the owner commits. $7 = now override
-- (nullable).
INSERT INTO idempotency_key (workspace_id, api_key_id, method, route, key, request_digest, created_at)
VALUES ($1, $2, $3, $4, $5, $6, coalesce($7::timestamptz, now()))
ON CONFLICT (workspace_id, api_key_id, method, route, key) DO UPDATE
SET request_digest = EXCLUDED.request_digest, created_at = EXCLUDED.created_at, response_body = NULL
WHERE idempotency_key.created_at <= EXCLUDED.created_at - interval '5 minutes'
RETURNING key;

-- name: idempotency_get
-- The stored request digest and response body of key $5 of API key $2, method $3, route $4, workspace $1.
SELECT request_digest, response_body, created_at
FROM idempotency_key
WHERE workspace_id = $1 AND api_key_id = $2 AND method = $3 AND route = $4 AND key = $5;

-- name: idempotency_store
-- Record the response body $6 of the request that owns key $5 of API key $2, method $3, route $4,
-- workspace $1 (same transaction as the work; only a success is stored, so its status is the endpoint's).
UPDATE idempotency_key SET response_body = $6
WHERE workspace_id = $1 AND api_key_id = $2 AND method = $3 AND route = $4 AND key = $5;

-- name: idempotency_delete_expired
-- Retention: delete up to $2 keys past the 5-minute replay window at $1 (now). Returns how many were deleted.
-- An expired key is only ever taken over by idempotency_claim, so deleting it changes no answer; a key a
-- claim holds locked (it locks the row even when it does not take it over) is skipped, never waited on.
WITH gone AS (
    DELETE FROM idempotency_key
    WHERE (workspace_id, api_key_id, method, route, key) IN (
        SELECT workspace_id, api_key_id, method, route, key FROM idempotency_key
        WHERE created_at <= $1::timestamptz - interval '5 minutes'
        ORDER BY created_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;
