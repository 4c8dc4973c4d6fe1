-- 0011_idempotency_scope: an Idempotency-Key belongs to one API key, method and route of a workspace, and an
-- ingress duplicate whose body differs from the stored delivery's is counted on that delivery.
--
-- Idempotency keys were scoped by (workspace, route), so another member's request with the same key got the
-- first member's stored response. The stored rows of the old scope cannot be attributed to an API key; they
-- only matter for 5 minutes, so they are dropped rather than guessed at (a client retrying across the
-- upgrade does the work once more, the same as a retry after the window). Only successes are stored and
-- their status is the endpoint's own, so response_status goes.
DELETE FROM idempotency_key;
ALTER TABLE idempotency_key
    DROP CONSTRAINT idempotency_key_pkey,
    DROP COLUMN response_status,
    ADD COLUMN api_key_id uuid NOT NULL REFERENCES api_key(id),
    ADD COLUMN method text NOT NULL,
    ADD PRIMARY KEY (workspace_id, api_key_id, method, route, key);

-- Correctly signed duplicates whose raw body differs from the stored one (the duplicate path counts them;
-- the accepted path never touches the column). A constant default adds the column without rewriting the
-- table; NOT VALID skips a scan of every existing row (all 0) under this ALTER's exclusive lock, while new
-- and updated rows are still checked.
ALTER TABLE webhook_delivery
    ADD COLUMN body_mismatch_count integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT webhook_delivery_body_mismatch_count_check CHECK (body_mismatch_count >= 0) NOT VALID;
