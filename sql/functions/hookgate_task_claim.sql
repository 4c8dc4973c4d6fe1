-- hookgate_task_claim: the task claim of pull runtimes and the push worker (since 0003_dispatch; its slots
-- come from hookgate_slots_take since 0015_one_dispatch_path; fair across autopilots since 0021_fair_claims).
-- Claim up to p_limit due queued tasks of one agent (or only p_task) within its concurrency cap, each leased
-- for p_lease_s seconds from p_at to p_holder; no agent above p_cap (HOOKGATE_AGENT_MAX_CONCURRENCY, an argument
-- since 0023_agent_cap_argument; NULL = no bound). The slot rule is hookgate_slots_take's, the one the take uses
-- for tasks born claimed: lock free slots from a random start (SKIP LOCKED), re-check them with a fresh snapshot
-- (READ COMMITTED: every claim committed before is seen), so two claimers can never fill one slot. Then pick
-- as many due tasks, fairly, and give each a slot stamped with a fresh lease token, the task's autopilot and
-- the time it was served.
-- A running task holds one agent_slot row, stamped with its lease token: the slot is free again as soon as
-- that lease ends (report, retry, expiry, cancel) without any write on release.
--
-- Fair share: an agent's queued tasks are taken round-robin across the autopilots that feed them (its "feeds",
-- agent_task.autopilot_id), oldest first within each. The feeds with queued tasks are found by a loose index
-- scan of agent_task_fair_idx (one index descent per feed, never the backlog), at most FEEDS of them per claim
-- from a random autopilot id onwards (wrapping), so past that many a claim sees a random window of them. A
-- feed's turn: least recently served first (the newest served_at of the agent's slots stamped with it; never
-- served = first), then the oldest head. The tasks are taken by rank within their feed, then by turn: the 1st
-- of each feed, then the 2nd, ... Candidates are read without locks, then locked in that order SKIP LOCKED;
-- when fewer than the free slots could be locked (a concurrent claimer took some, or tasks without an
-- autopilot), the rest is filled oldest first as before. Slots remember who they served (a write the claim
-- makes anyway), so this needs no per-claim state of its own and holds across processes.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_task_claim(p_agent uuid, p_task uuid, p_limit integer, p_lease_s double precision,
                                               p_holder text, p_at timestamptz, p_cap integer)
RETURNS SETOF agent_task
LANGUAGE plpgsql
-- A claim returns a few rows (at most its limit, 32 from the push worker): without this the planner takes the
-- default 1,000 for a set-returning function, and the query that wraps the claim (sql/queries/agent_task.sql,
-- task_claim) joined those rows to autopilot_run by hashing the whole table, ~8 ms per claim at 6,000 runs.
ROWS 8
-- Key plans only, as hookgate_slots_take and the take: PL/pgSQL caches a generic plan per session after a few
-- calls, made from the statistics of that moment; a worker whose first claims ran while agent_task was small
-- kept scanning it whole as the backlog grew (a 20,000-run drain spent ~4x the PostgreSQL CPU per run). Every
-- statement here reads by primary key or an index prefix. The settings hold only while the function runs.
-- No sorts where an index gives the order: the walk over the autopilots (below) reads agent_task_fair_idx, one
-- descent per autopilot; a plan made while the queue was short (every estimate one row) read the agent's whole
-- queue from agent_task_queue_idx and sorted it instead, five times per claim (~25 ms at 10,000 queued tasks).
-- The sorts no index can spare are costed as disabled in every plan alike; jit off, since those costs would
-- otherwise make every claim compile its plans (~0.3 s each).
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_sort = off SET enable_incremental_sort = off SET jit = off
AS $$
DECLARE
    feeds  CONSTANT integer := 128;
    free   integer[];
    todo   uuid[];
    more   uuid[];
    cands  uuid[];
    want   integer;
    start  uuid := gen_random_uuid();
BEGIN
    free := hookgate_slots_take(p_agent, p_limit, p_cap);
    IF cardinality(free) = 0 THEN
        RETURN;
    END IF;
    IF p_task IS NULL THEN
        -- A few more candidates than slots, so a concurrent claimer's locks leave enough to take.
        want := 2 * cardinality(free) + 4;
        WITH RECURSIVE above AS (
            (SELECT t.autopilot_id, 1 AS depth FROM agent_task t
             WHERE t.agent_id = p_agent AND t.status = 'queued' AND t.autopilot_id >= start
             ORDER BY t.autopilot_id LIMIT 1)
            UNION ALL
            SELECT (SELECT t.autopilot_id FROM agent_task t
                    WHERE t.agent_id = p_agent AND t.status = 'queued' AND t.autopilot_id > a.autopilot_id
                    ORDER BY t.autopilot_id LIMIT 1), a.depth + 1
            FROM above a WHERE a.autopilot_id IS NOT NULL AND a.depth < feeds
        ), below AS (
            (SELECT t.autopilot_id, 1 AS depth FROM agent_task t
             WHERE t.agent_id = p_agent AND t.status = 'queued' AND t.autopilot_id < start
             ORDER BY t.autopilot_id LIMIT 1)
            UNION ALL
            SELECT (SELECT t.autopilot_id FROM agent_task t
                    WHERE t.agent_id = p_agent AND t.status = 'queued' AND t.autopilot_id > b.autopilot_id
                      AND t.autopilot_id < start
                    ORDER BY t.autopilot_id LIMIT 1), b.depth + 1
            FROM below b WHERE b.autopilot_id IS NOT NULL AND b.depth < feeds
        ), fed AS (
            SELECT f.autopilot_id FROM (
                SELECT a.autopilot_id, a.depth AS n FROM above a WHERE a.autopilot_id IS NOT NULL
                UNION ALL
                SELECT b.autopilot_id, feeds + b.depth FROM below b WHERE b.autopilot_id IS NOT NULL
            ) f ORDER BY f.n LIMIT feeds
        ), served AS (
            -- Who each slot served last, and when (a lowered cap's retired slots included: they served too).
            SELECT sl.autopilot_id, max(sl.served_at) AS at FROM agent_slot sl
            WHERE sl.agent_id = p_agent AND sl.autopilot_id IS NOT NULL
            GROUP BY sl.autopilot_id
        ), turns AS (
            SELECT f.autopilot_id, row_number() OVER (ORDER BY s.at NULLS FIRST, h.available_at, h.id) AS turn
            FROM fed f
            CROSS JOIN LATERAL (
                SELECT t.id, t.available_at FROM agent_task t
                WHERE t.agent_id = p_agent AND t.status = 'queued' AND t.autopilot_id = f.autopilot_id
                  AND t.available_at <= p_at
                ORDER BY t.available_at, t.id LIMIT 1
            ) h
            LEFT JOIN served s ON s.autopilot_id = f.autopilot_id
            ORDER BY turn LIMIT want
        ), picked AS (
            -- Feed by feed, its oldest: no feed can give more than want - (feeds - 1) to the candidates.
            SELECT c.id, tu.turn, row_number() OVER (PARTITION BY tu.autopilot_id ORDER BY c.available_at, c.id) AS nth
            FROM turns tu
            CROSS JOIN LATERAL (
                SELECT t.id, t.available_at FROM agent_task t
                WHERE t.agent_id = p_agent AND t.status = 'queued' AND t.autopilot_id = tu.autopilot_id
                  AND t.available_at <= p_at
                ORDER BY t.available_at, t.id LIMIT greatest(1, want - (SELECT count(*) FROM turns) + 1)
            ) c
        )
        SELECT array_agg(p.id ORDER BY p.nth, p.turn) INTO cands
        FROM (SELECT picked.id, picked.nth, picked.turn FROM picked ORDER BY picked.nth, picked.turn LIMIT want) p;

        -- Each candidate locked by its key alone, in order, until there are enough; whether it is still due is
        -- checked on the row locked (its latest version). With the other conditions in the lookup (a join, or
        -- conditions the planner pushes down into it: OFFSET 0 keeps them out), a plan made while agent_task
        -- was small read it from the partial index of the agent's queued tasks instead, scanning all of them,
        -- and every dead entry a drain leaves there, once per candidate (~50 ms per claim at 20,000 tasks).
        SELECT array_agg(q.id ORDER BY q.n) INTO todo FROM (
            SELECT l.id, c.n FROM unnest(cands) WITH ORDINALITY AS c(id, n)
            CROSS JOIN LATERAL (
                SELECT t.id, t.agent_id, t.status, t.available_at FROM agent_task t WHERE t.id = c.id
                OFFSET 0 FOR UPDATE SKIP LOCKED
            ) l
            WHERE l.agent_id = p_agent AND l.status = 'queued' AND l.available_at <= p_at
            LIMIT cardinality(free)
        ) q;
        IF coalesce(cardinality(todo), 0) < cardinality(free) THEN
            SELECT array_agg(q.id ORDER BY q.available_at, q.id) INTO more FROM (
                SELECT id, available_at FROM agent_task
                WHERE agent_id = p_agent AND status = 'queued' AND available_at <= p_at
                  AND id <> ALL (coalesce(todo, '{}'))
                ORDER BY available_at, id LIMIT cardinality(free) - coalesce(cardinality(todo), 0)
                FOR UPDATE SKIP LOCKED
            ) q;
            todo := coalesce(todo, '{}') || coalesce(more, '{}');
        END IF;
        IF cardinality(todo) = 0 THEN
            RETURN;
        END IF;
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
        SELECT s.slot, k.id, gen_random_uuid() AS token, t.autopilot_id
        FROM unnest(free) WITH ORDINALITY AS s(slot, n)
        JOIN unnest(todo) WITH ORDINALITY AS k(id, n) USING (n)
        JOIN agent_task t ON t.id = k.id
    ), slotted AS (
        UPDATE agent_slot sl SET lease_token = p.token, autopilot_id = p.autopilot_id, served_at = now()
        FROM pairs p WHERE sl.agent_id = p_agent AND sl.slot = p.slot
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
