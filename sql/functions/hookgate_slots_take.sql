-- hookgate_slots_take: the slot rule, the one place it is written: used by the take (tasks born claimed) and by
-- hookgate_task_claim (since 0008_dispatch_take; key plans since 0010_take_key_plans).
-- Lock up to p_want free concurrency slots of agent p_agent and return their numbers; the caller gives each
-- a fresh lease token in the same transaction. Lock free slots in slot order from a random start (SKIP
-- LOCKED, so concurrent claimers take different ones), then re-check them with a fresh snapshot (READ
-- COMMITTED, volatile function: a claim committed before our lock is seen, none can come after it). An
-- archived or unknown agent gets none. A lowered cap stays strict (since 0014_agent_update): the cap is read
-- again with the fresh snapshot, and tasks still running on slots it retired take free slots first
-- (hookgate_slots_settle). An unhealthy agent (agent_health, since 0016_delivery_reliability: its circuit is
-- open) gets no slot, except one for a probe once its next probe is due; each probe doubles the interval
-- (up to its longest) and sets the next probe that far on. The cap is the agent's max_concurrency, at most
-- p_cap (HOOKGATE_AGENT_MAX_CONCURRENCY, passed down by the claims since 0023_agent_cap_argument, before that a
-- session setting; NULL = no bound): a row above it counts as a lowered cap.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_slots_take(p_agent uuid, p_want integer, p_cap integer)
RETURNS integer[]
LANGUAGE plpgsql
-- Key plans only: every statement here reads rows by primary key or by an index prefix, so nested loops over
-- index scans are right at any size. Generic plans are made once per session from the statistics of that
-- moment, and a connection that first ran this while the tables were small kept hash joins over sequential
-- scans of agent_task, agent_slot and sometimes webhook_delivery until the next ANALYZE (seen with
-- auto_explain in bench/dispatch.py, where the tables grow from empty to ~10,000 rows in half a minute; a
-- young production database does the same). The settings hold only while the function runs.
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
-- No JIT, as in the take and the task claim that call it (a pinned plan can be costed past jit_above_cost).
SET jit = off
AS $$
DECLARE
    cap     integer;
    off     integer;
    free    integer[];
    sick    boolean;
    made    boolean;
    retired boolean;
BEGIN
    -- The cap, the agent's health and whether its slots are made, in one statement: each statement of the take
    -- costs its executor start-up, more than these reads by key.
    SELECT least(a.max_concurrency, coalesce(p_cap, a.max_concurrency)),
           EXISTS (SELECT 1 FROM agent_health h WHERE h.agent_id = p_agent AND h.state = 'unhealthy'),
           EXISTS (SELECT 1 FROM agent_slot sl
                   WHERE sl.agent_id = p_agent AND sl.slot = least(a.max_concurrency, coalesce(p_cap, a.max_concurrency)) - 1)
    INTO cap, sick, made FROM agent a WHERE a.id = p_agent AND a.archived_at IS NULL;
    IF NOT FOUND OR coalesce(p_want, 0) <= 0 THEN
        RETURN '{}';
    END IF;
    IF sick THEN
        UPDATE agent_health h
        SET next_probe_at = now() + make_interval(secs => least(h.probe_interval_s * 2, h.probe_max_s)),
            probe_interval_s = least(h.probe_interval_s * 2, h.probe_max_s), updated_at = now()
        WHERE h.agent_id = p_agent AND h.state = 'unhealthy' AND h.next_probe_at <= now();
        IF NOT FOUND THEN
            RETURN '{}';
        END IF;
        p_want := 1;
    END IF;
    IF NOT made THEN
        INSERT INTO agent_slot (agent_id, slot) SELECT p_agent, g FROM generate_series(0, cap - 1) g
        ON CONFLICT DO NOTHING;
    END IF;
    -- A slot is free when no running task holds its lease token. That test is a scalar subquery on purpose,
    -- read by key (agent_task_running_token_idx) for each slot looked at: written as NOT EXISTS it became an
    -- anti-join whose generic plan read every running task for every slot (17 ms with 60 of 64 slots busy,
    -- against 0.26 ms by key; EXPLAIN ANALYZE in docs/BENCHMARKS.md, "The slot test by key").
    off := floor(random() * cap)::integer;
    SELECT array_agg(s.slot) INTO free FROM (
        SELECT sl.slot FROM agent_slot sl
        WHERE sl.agent_id = p_agent AND sl.slot >= off AND sl.slot < cap
          AND (SELECT r.id FROM agent_task r WHERE r.lease_token = sl.lease_token AND r.status = 'running' LIMIT 1) IS NULL
        ORDER BY sl.slot
        LIMIT p_want
        FOR UPDATE OF sl SKIP LOCKED
    ) s;
    IF coalesce(cardinality(free), 0) < p_want THEN
        SELECT coalesce(free, '{}') || coalesce(array_agg(s.slot), '{}') INTO free FROM (
            SELECT sl.slot FROM agent_slot sl
            WHERE sl.agent_id = p_agent AND sl.slot < off
              AND (SELECT r.id FROM agent_task r WHERE r.lease_token = sl.lease_token AND r.status = 'running'
                   LIMIT 1) IS NULL
            ORDER BY sl.slot
            LIMIT p_want - coalesce(cardinality(free), 0)
            FOR UPDATE OF sl SKIP LOCKED
        ) s;
    END IF;
    IF coalesce(cardinality(free), 0) = 0 THEN
        RETURN '{}';
    END IF;
    -- Fresh snapshot: which of the slots we now hold are still free, and under the cap (a lower one may have
    -- been set since it was read)? One statement with the cap's re-read, each held slot read by key (LIMIT 1
    -- keeps the lateral read from becoming a join: its generic plan read all the agent's slots, each probing its
    -- running task, 0.07 ms with a cap of 64, to keep one). And are there slots at or above the cap with a lease
    -- token, which hookgate_slots_settle may move to free slots below it? None (most takes): its statement is
    -- not run.
    SELECT c.cap,
           (SELECT array_agg(f.slot ORDER BY f.slot)
            FROM unnest(free) AS f(slot)
            CROSS JOIN LATERAL (SELECT sl.lease_token FROM agent_slot sl
                                WHERE sl.agent_id = p_agent AND sl.slot = f.slot LIMIT 1) sl
            WHERE f.slot < c.cap
              AND (SELECT r.id FROM agent_task r WHERE r.lease_token = sl.lease_token AND r.status = 'running'
                   LIMIT 1) IS NULL),
           EXISTS (SELECT 1 FROM agent_slot sl WHERE sl.agent_id = p_agent AND sl.slot >= c.cap AND sl.lease_token IS NOT NULL)
    INTO cap, free, retired
    FROM (SELECT least(max_concurrency, coalesce(p_cap, max_concurrency)) AS cap FROM agent WHERE id = p_agent) c;
    IF NOT retired THEN
        RETURN coalesce(free, '{}');
    END IF;
    -- Tasks still running over a lowered cap take free slots first.
    RETURN hookgate_slots_settle(p_agent, cap, free);
END
$$;
