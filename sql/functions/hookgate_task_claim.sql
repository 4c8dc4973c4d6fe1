-- hookgate_task_claim: the task claim of pull runtimes and the push worker (since 0003_dispatch; its slots
-- come from hookgate_slots_take since 0015_one_dispatch_path).
-- Claim up to p_limit due queued tasks of one agent (or only p_task) within its concurrency cap, each leased
-- for p_lease_s seconds from p_at to p_holder. The slot rule is hookgate_slots_take's, the one the take uses
-- for tasks born claimed: lock free slots from a random start (SKIP LOCKED), re-check them with a fresh snapshot
-- (READ COMMITTED: every claim committed before is seen), so two claimers can never fill one slot. Then lock as
-- many due tasks (oldest first, SKIP LOCKED) and give each a slot stamped with a fresh lease token.
-- A running task holds one agent_slot row, stamped with its lease token: the slot is free again as soon as
-- that lease ends (report, retry, expiry, cancel) without any write on release.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_task_claim(p_agent uuid, p_task uuid, p_limit integer, p_lease_s double precision,
                                               p_holder text, p_at timestamptz)
RETURNS SETOF agent_task
LANGUAGE plpgsql AS $$
DECLARE
    free   integer[];
    todo   uuid[];
BEGIN
    free := hookgate_slots_take(p_agent, p_limit);
    IF cardinality(free) = 0 THEN
        RETURN;
    END IF;
    IF p_task IS NULL THEN
        SELECT array_agg(q.id ORDER BY q.available_at, q.id) INTO todo FROM (
            SELECT id, available_at FROM agent_task
            WHERE agent_id = p_agent AND status = 'queued' AND available_at <= p_at
            ORDER BY available_at, id LIMIT cardinality(free) FOR UPDATE SKIP LOCKED
        ) q;
    ELSE
        SELECT array_agg(q.id) INTO todo FROM (
            SELECT id FROM agent_task
            WHERE id = p_task AND agent_id = p_agent AND status = 'queued' AND available_at <= p_at
            FOR UPDATE SKIP LOCKED
        ) q;
    END IF;
    IF todo IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH pairs AS (
        SELECT s.slot, k.id, gen_random_uuid() AS token
        FROM unnest(free) WITH ORDINALITY AS s(slot, n)
        JOIN unnest(todo) WITH ORDINALITY AS k(id, n) USING (n)
    ), slotted AS (
        UPDATE agent_slot sl SET lease_token = p.token FROM pairs p WHERE sl.agent_id = p_agent AND sl.slot = p.slot
    )
    UPDATE agent_task t
    SET status = 'running', attempt = t.attempt + 1, lease_token = p.token,
        lease_expires_at = p_at + make_interval(secs => p_lease_s), holder_instance = p_holder,
        started_at = coalesce(t.started_at, now()), attempt_started_at = now(), updated_at = now()
    FROM pairs p
    WHERE t.id = p.id
    RETURNING t.*;
END
$$;
