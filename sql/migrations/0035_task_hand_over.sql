-- 0035_task_hand_over: a flush that records push successes claims, in the same statement, the next queued tasks
-- of their agents into the slots those successes free (a hand-over): the slot never goes back to the pool idle
-- and the push worker makes no claim of its own for them.
--
-- hookgate_task_claim(..., p_cap, p_freed): p_freed NULL takes free slots by the slot rule as before
-- (hookgate_slots_take); given, the claim takes the slots still stamped with those lease tokens, which the same
-- statement just released (hookgate_slots_hand_over). Their bodies are their files in sql/functions/, which
-- `hookgate migrate` applies right after the migrations, in the same run: the functions are created here with
-- placeholder bodies.
DROP FUNCTION hookgate_task_claim(uuid, uuid, integer, double precision, text, timestamptz, integer);

CREATE FUNCTION hookgate_task_claim(p_agent uuid, p_task uuid, p_limit integer, p_lease_s double precision,
                                    p_holder text, p_at timestamptz, p_cap integer, p_freed uuid[])
RETURNS SETOF agent_task
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'hookgate_task_claim is defined by sql/functions/hookgate_task_claim.sql';
END
$$;

CREATE FUNCTION hookgate_slots_hand_over(p_agent uuid, p_freed uuid[], p_cap integer)
RETURNS integer[]
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'hookgate_slots_hand_over is defined by sql/functions/hookgate_slots_hand_over.sql';
END
$$;
