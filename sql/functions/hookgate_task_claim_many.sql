-- hookgate_task_claim_many: claim a given batch of an agent's queued tasks (since 0005_perf; its slots come
-- from hookgate_slots_take since 0009_one_slot_rule).
-- Claim the given queued, due tasks p_tasks of agent p_agent (in that order) for p_holder, as many as the
-- agent has free concurrency slots, each leased for p_lease_s seconds from p_at. The slot rule of
-- hookgate_task_claim, for many tasks in a few statements: the slots come from hookgate_slots_take, so the
-- batched rule (lock free slots from a random start with SKIP LOCKED, re-check them with a fresh snapshot) is
-- written once; then lock the tasks, and give each task a slot and a fresh lease token.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_task_claim_many(p_agent uuid, p_tasks uuid[], p_lease_s double precision,
                                                    p_holder text, p_at timestamptz)
RETURNS SETOF agent_task
LANGUAGE plpgsql AS $$
DECLARE
    free   integer[];
    todo   uuid[];
BEGIN
    free := hookgate_slots_take(p_agent, coalesce(cardinality(p_tasks), 0));
    IF cardinality(free) = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(q.id ORDER BY q.n) INTO todo FROM (
        SELECT t.id, u.n FROM unnest(p_tasks) WITH ORDINALITY AS u(id, n)
        JOIN agent_task t ON t.id = u.id
        WHERE t.agent_id = p_agent AND t.status = 'queued' AND t.available_at <= p_at
        ORDER BY u.n
        LIMIT cardinality(free)
        FOR UPDATE OF t SKIP LOCKED
    ) q;
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
        started_at = coalesce(t.started_at, now()), updated_at = now()
    FROM pairs p
    WHERE t.id = p.id
    RETURNING t.*;
END
$$;
