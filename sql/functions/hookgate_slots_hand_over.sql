-- hookgate_slots_hand_over: the slots of tasks that just ended, handed to the next claim of their agent (since
-- 0035_task_hand_over), for hookgate_task_claim called with p_freed by the flush of push outcomes.
-- Lock the slots of agent p_agent still stamped with one of the lease tokens p_freed (tasks the caller's own
-- statement released: they run no more, so their slots are free) and return their numbers; the caller gives each
-- a fresh lease token in the same transaction. The slot rule of hookgate_slots_take otherwise: an archived or
-- unknown agent gets none; an unhealthy one none (its probes go through hookgate_slots_take); only slots under
-- the cap (the agent's max_concurrency, at most p_cap; NULL = no bound), and tasks still running on slots a
-- lowered cap retired take them first (hookgate_slots_settle). A slot another claimer locked (SKIP LOCKED) or
-- stamped meanwhile (the token no longer matches the locked row) is not handed over. Nothing scans the agent's
-- other slots or probes their tasks: that is the hand-over's saving over a claim that looks for free slots.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_slots_hand_over(p_agent uuid, p_freed uuid[], p_cap integer)
RETURNS integer[]
LANGUAGE plpgsql
-- Key plans only, as in hookgate_slots_take: every statement reads rows by an index prefix.
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
-- No JIT, as in hookgate_slots_take.
SET jit = off
AS $$
DECLARE
    cap   integer;
    free  integer[];
BEGIN
    IF coalesce(cardinality(p_freed), 0) = 0 THEN
        RETURN '{}';
    END IF;
    SELECT least(max_concurrency, coalesce(p_cap, max_concurrency))
    INTO cap FROM agent WHERE id = p_agent AND archived_at IS NULL;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM agent_health h WHERE h.agent_id = p_agent AND h.state = 'unhealthy') THEN
        RETURN '{}';
    END IF;
    SELECT array_agg(s.slot ORDER BY s.slot) INTO free FROM (
        SELECT sl.slot FROM agent_slot sl
        WHERE sl.agent_id = p_agent AND sl.slot < cap AND sl.lease_token = ANY (p_freed)
        FOR UPDATE OF sl SKIP LOCKED
    ) s;
    RETURN hookgate_slots_settle(p_agent, cap, coalesce(free, '{}'));
END
$$;
