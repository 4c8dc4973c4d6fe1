-- hookgate_delivery_take: the delivery worker's claim, pacing and dispatch in one statement, its hot path
-- (since 0008_dispatch_take; key plans since 0010_take_key_plans; fair across workspaces since
-- 0020_fair_deliveries).
-- Claim up to p_limit due queued deliveries fairly, workspace first: visit the workspaces with due work
-- round-robin (after the worker's workspace cursor p_cursor, wrapping round; at most p_limit of them), and in
-- each its triggers round-robin (after that workspace's own cursor, p_trigger_cursors: a JSON object workspace
-- id -> trigger id, wrapping round; at most p_fanout triggers, fewer when many workspaces share the batch).
-- Both walks are loose index scans of webhook_delivery_fair_idx, every probe bounded to the id range of the
-- queued deliveries so that only the partitions holding them are read (since 0024_partitions). The batch interleaves workspaces (the 1st
-- row of each, then the 2nd, ...), and within a workspace its triggers the same way, so every workspace with
-- due work gets an equal share of the batch while it has rows, and a workspace with many busy triggers no
-- more than one with a single trigger. Rows are locked FOR UPDATE SKIP LOCKED, one pacing grant per trigger
-- (hookgate_pace_take), rows over their trigger's budget released to the window's end without spending an
-- attempt and marked reason_code 'paced'
-- (the API shows it with available_at as next_attempt_at; dispatch clears it). Then, without writing a lease on
-- them, dispatch every granted delivery whose admitted run is still plain 'pending' in run_only mode with an
-- unarchived agent (hookgate_assignee_agent) whose runtime is ready (hookgate_runtime_ready): what ingress
-- stores. The delivery row is locked by this transaction from the claim to its 'dispatched' write, which is
-- what the lease token guards on the one-by-one path. Runs are locked SKIP LOCKED (a run another dispatcher
-- holds goes to the one-by-one path, which waits for it). The first p_claims tasks of HTTP agents that get a
-- free slot (hookgate_slots_take), at most p_rooms[i] of agent p_room_agents[i] and p_room_other of any other
-- agent (the pusher's fair share, since 0021_fair_claims), and of those at most p_space_rooms[i] of workspace
-- p_room_spaces[i] and p_space_other of any other workspace (since 0030_workspace_rooms: the agents of one
-- workspace, however many and whether the pusher knows them or not, share its room), are inserted already
-- 'running' with a fresh lease token for p_holder, leased
-- least(agent timeout, p_lease_cap_s) + p_lease_margin_s, audited CLAIM, their runs 'running'; the other tasks
-- are inserted 'queued' (runs 'queued') and announced on hookgate_tasks. One task per run attempt: idempotency
-- key 'run:<run id>:1' (ON CONFLICT DO NOTHING; such a delivery is leased, not dispatched); its attempts are
-- p_max_attempts, or one more than its agent's own retry schedule has delays. Every other granted
-- delivery (crash window, create_issue, skipped, half-made, run locked elsewhere) is leased for p_lease_s
-- seconds (lease token, available_at = lease end) and returned for the one-by-one path. p_at: clock override
-- (nullable). Returns one row per granted delivery: kind 'dispatched' (task columns set; claimed = its lease is
-- ours; previous_secret_ct = the agent's previous signing secret while its rotation window lasts) or 'leased'
-- (the delivery columns). Result type since 0014_agent_update (previous_secret_ct); p_trigger_cursors since
-- 0020_fair_deliveries. A task records its run's autopilot (the claim's fair share) and a slot who it served
-- (since 0021_fair_claims). p_cap: no agent gets more slots than this (HOOKGATE_AGENT_MAX_CONCURRENCY, an
-- argument since 0023_agent_cap_argument; NULL = no bound). The workspaces' rooms are arguments since
-- 0030_workspace_rooms. p_ids (since 0033_take_named): take only these deliveries, by key, instead of walking
-- the queue (NULL = walk); the rest (pacing, dispatch, slots, leases) is the same.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_delivery_take(
    p_limit integer, p_lease_s double precision, p_cursor uuid, p_fanout integer, p_at timestamptz,
    p_max_attempts integer, p_heartbeat_s double precision, p_holder text, p_claims integer,
    p_lease_cap_s double precision, p_lease_margin_s double precision, p_trigger_cursors jsonb,
    p_room_agents uuid[], p_rooms integer[], p_room_other integer, p_room_spaces uuid[], p_space_rooms integer[],
    p_space_other integer, p_cap integer, p_ids uuid[])
RETURNS TABLE (kind text, id uuid, lease_token uuid, workspace_id uuid, trigger_id uuid, autopilot_id uuid,
               event text, envelope jsonb, run_id uuid, dispatch_attempts integer, received_at timestamptz,
               rate_limit_per_minute integer, claimed boolean, task_id uuid, agent_id uuid, payload jsonb,
               attempt integer, max_attempts integer, task_lease_token uuid, lease_expires_at timestamptz,
               endpoint_url text, timeout_s double precision, signing_secret_ct bytea, autopilot_title text,
               autopilot_instructions text, previous_secret_ct bytea)
LANGUAGE plpgsql
-- Generic plans: the statements here are index lookups by key whatever the arguments, and planning them
-- anew on every call (PostgreSQL keeps custom plans when a generic one looks costlier on paper) cost
-- ~0.5 ms of server CPU per call, more than the work itself for a batch of one.
SET plan_cache_mode = force_generic_plan
-- Key plans only: every statement here reads rows by primary key or by an index prefix, so nested loops over
-- index scans are right at any size. Generic plans are made once per session from the statistics of that
-- moment, and a connection that first ran this while the tables were small kept hash joins over sequential
-- scans of agent_task, agent_slot and sometimes webhook_delivery until the next ANALYZE (seen with
-- auto_explain in bench/dispatch.py, where the tables grow from empty to ~10,000 rows in half a minute; a
-- young production database does the same). The settings hold only while the function runs.
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
-- No JIT: once autovacuum had analyzed the tables in the middle of a drain, the walk's estimated cost passed
-- jit_above_cost and every take compiled its plan again, 321 functions in ~150 ms, against ~4 ms to run it
-- (EXPLAIN ANALYZE on a copy of a half-drained backlog of 20,000); the drain fell from ~2,300 to ~300 runs/s.
-- The functions it calls (hookgate_pace_take, hookgate_slots_take) run under this setting too.
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_at         timestamptz := coalesce(p_at, now());
    v_low        uuid := '00000000-0000-0000-0000-000000000000';
    v_high       uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
    v_qlo        uuid;
    v_qhi        uuid;
    v_ids        uuid[];
    v_triggers   uuid[];
    v_due        timestamptz[];
    v_granted    uuid[];
    v_over       uuid[];
    v_over_until timestamptz[];
    v_plain      uuid[];
    v_runs       uuid[];
    v_agents     uuid[];
    v_spaces     uuid[];
    v_pushable   boolean[];
    v_leases     double precision[];
    v_tokens     uuid[];
    v_slots      integer[];
    v_agent      uuid;
    v_at_n       integer[];
    v_free       integer[];
    v_done       integer := 0;
    v_id         uuid;
BEGIN
    -- v_qlo..v_qhi: an id range that holds every delivery this take can read or write. Each statement below
    -- that reads or writes webhook_delivery is bounded to it, whatever else selects its rows (a join, a key,
    -- an array): the bounds are parameters of the generic plan, and a bound on the partition key is what lets
    -- PostgreSQL leave the other partitions out when the statement starts (a join key or `= ANY (array)` does
    -- not). Deliveries are kept in day partitions, forever by default, so an unbounded statement would start
    -- and probe one more partition every day (a named take of one delivery: 2.2 ms with 8 partitions, 3.5 ms
    -- with 38, 15.7 ms with 366; bounded, 2.0, 2.8 and 6.1 ms; docs/BENCHMARKS.md).
    -- For a walk, the range is that of the queued deliveries (one probe of webhook_delivery_queued_idx per
    -- partition, once per take), so that each loose-index-scan probe reads the few partitions that can hold
    -- queued rows instead of a Merge Append over all of them (since 0024_partitions). No clock is assumed: a
    -- row queued after these reads (outside the range) waits for the next take. `dispatch_attempts >= 0`
    -- (always true) is the predicate of webhook_delivery_queued_idx, which only these two reads can use.
    -- A take of named deliveries (p_ids) walks nothing: its range is that of the named ids (below).
    IF p_ids IS NULL THEN
        SELECT (SELECT q.id FROM webhook_delivery q WHERE q.status = 'queued' AND q.dispatch_attempts >= 0 ORDER BY q.id LIMIT 1),
               (SELECT q.id FROM webhook_delivery q WHERE q.status = 'queued' AND q.dispatch_attempts >= 0 ORDER BY q.id DESC LIMIT 1)
        INTO v_qlo, v_qhi;
        IF v_qlo IS NULL THEN
            RETURN;
        END IF;

        WITH RECURSIVE spaces AS (
            -- Loose index scan over the workspaces with due work: the first after p_cursor (or from the start when
            -- there is none after it), then the next ones, wrapping round to those up to p_cursor; p_limit at most.
            -- Each probe returns the workspace and its first trigger with due work (`pair`): the entry it stops at
            -- holds both, and the walk over that workspace's triggers starts from it when it wraps round, instead of
            -- reading the index from the workspace's start again (past every entry that left the queue since the
            -- last vacuum).
            SELECT a.pair, 1 AS depth, (p_cursor IS NULL OR a.first IS NULL) AS wrapped
            FROM (SELECT s.first, coalesce(s.first, CASE WHEN p_cursor IS NOT NULL THEN
                      (SELECT ARRAY[d.workspace_id, d.trigger_id] FROM webhook_delivery d
                       WHERE d.status = 'queued' AND d.available_at <= v_at AND d.id BETWEEN v_qlo AND v_qhi AND d.workspace_id <= p_cursor
                       ORDER BY d.workspace_id, d.trigger_id LIMIT 1) END) AS pair
                  FROM (SELECT (SELECT ARRAY[d.workspace_id, d.trigger_id] FROM webhook_delivery d
                                WHERE d.status = 'queued' AND d.available_at <= v_at AND d.id BETWEEN v_qlo AND v_qhi
                                  AND d.workspace_id > coalesce(p_cursor, v_low)
                                ORDER BY d.workspace_id, d.trigger_id LIMIT 1) AS first) s
                  -- OFFSET 0: kept a subquery, so each probe runs once. Pulled up, its pair was computed twice (in
                  -- this WHERE and in the row), and the wrap-round probe, which steps over every index entry that
                  -- left the queue since the last vacuum, read them twice per take.
                  OFFSET 0) a
            WHERE a.pair IS NOT NULL
            UNION ALL
            SELECT coalesce(n.next, CASE WHEN NOT s.wrapped THEN
                       (SELECT ARRAY[d.workspace_id, d.trigger_id] FROM webhook_delivery d
                        WHERE d.status = 'queued' AND d.available_at <= v_at AND d.id BETWEEN v_qlo AND v_qhi AND d.workspace_id <= p_cursor
                        ORDER BY d.workspace_id, d.trigger_id LIMIT 1) END),
                   s.depth + 1, s.wrapped OR n.next IS NULL
            FROM spaces s CROSS JOIN LATERAL (
                SELECT (SELECT ARRAY[d.workspace_id, d.trigger_id] FROM webhook_delivery d
                        WHERE d.status = 'queued' AND d.available_at <= v_at AND d.id BETWEEN v_qlo AND v_qhi AND d.workspace_id > s.pair[1]
                          AND d.workspace_id <= CASE WHEN s.wrapped THEN coalesce(p_cursor, v_high) ELSE v_high END
                        ORDER BY d.workspace_id, d.trigger_id LIMIT 1) AS next) n
            WHERE s.pair IS NOT NULL AND s.depth < p_limit
        ), visited AS (
            -- Each workspace's share of the triggers visited: p_fanout, fewer when many workspaces share the batch.
            SELECT s.pair[1] AS workspace_id, s.pair[2] AS first_trigger, s.depth AS ws_ord,
                   least(p_fanout, ceil(p_limit::numeric / count(*) OVER ())::integer) AS trigger_cap,
                   count(*) OVER () AS spaces_n,
                   (p_trigger_cursors ->> s.pair[1]::text)::uuid AS trigger_cursor
            FROM spaces s WHERE s.pair IS NOT NULL
        ), heads AS (
            -- Within each workspace the same walk over its triggers, after its own cursor (p_trigger_cursors), from
            -- its first trigger with due work (first_trigger) when it has no cursor or wraps round past it.
            SELECT v.workspace_id, v.ws_ord, v.trigger_cap, v.trigger_cursor, v.first_trigger, a.trigger_id, 1 AS depth,
                   (v.trigger_cursor IS NULL OR a.first IS NULL) AS wrapped
            FROM visited v CROSS JOIN LATERAL (
                SELECT s.first, coalesce(s.first, CASE WHEN v.first_trigger <= v.trigger_cursor THEN v.first_trigger END)
                           AS trigger_id
                FROM (SELECT CASE WHEN v.trigger_cursor IS NULL THEN v.first_trigger ELSE
                              (SELECT d.trigger_id FROM webhook_delivery d
                               WHERE d.workspace_id = v.workspace_id AND d.status = 'queued' AND d.available_at <= v_at AND d.id BETWEEN v_qlo AND v_qhi
                                 AND d.trigger_id > v.trigger_cursor
                               ORDER BY d.trigger_id LIMIT 1) END AS first
                      OFFSET 0) s) a  -- OFFSET 0: one probe, as in spaces above
            UNION ALL
            SELECT h.workspace_id, h.ws_ord, h.trigger_cap, h.trigger_cursor, h.first_trigger,
                   coalesce(n.next, CASE WHEN NOT h.wrapped AND h.first_trigger <= h.trigger_cursor THEN h.first_trigger END),
                   h.depth + 1, h.wrapped OR n.next IS NULL
            FROM heads h CROSS JOIN LATERAL (
                SELECT (SELECT d.trigger_id FROM webhook_delivery d
                        WHERE d.workspace_id = h.workspace_id AND d.status = 'queued' AND d.available_at <= v_at AND d.id BETWEEN v_qlo AND v_qhi
                          AND d.trigger_id > h.trigger_id
                          AND d.trigger_id <= CASE WHEN h.wrapped THEN coalesce(h.trigger_cursor, v_high) ELSE v_high END
                        ORDER BY d.trigger_id LIMIT 1) AS next) n
            WHERE h.trigger_id IS NOT NULL AND h.depth < h.trigger_cap
        ), walked AS (
            -- A trigger can get no more than the batch less one row per other workspace and per other trigger of
            -- its own (those come first), so that is all it locks.
            SELECT h.workspace_id, h.ws_ord, h.trigger_id, h.depth AS trigger_ord,
                   greatest(1, p_limit - (v.spaces_n - 1) - (count(*) OVER (PARTITION BY h.workspace_id) - 1))::integer
                       AS take_n
            FROM heads h JOIN visited v ON v.workspace_id = h.workspace_id
            WHERE h.trigger_id IS NOT NULL
        ), locked AS (
            -- Ordered by webhook_delivery_fair_idx (workspace_id, trigger_id, available_at, id), so each trigger's
            -- head is read, not its backlog.
            SELECT x.id, x.trigger_id, x.available_at, w.workspace_id, w.ws_ord, w.trigger_ord,
                   row_number() OVER (PARTITION BY x.trigger_id ORDER BY x.available_at) AS rn
            FROM walked w CROSS JOIN LATERAL (
                SELECT d.id, d.trigger_id, d.available_at FROM webhook_delivery d
                WHERE d.workspace_id = w.workspace_id AND d.trigger_id = w.trigger_id AND d.status = 'queued' AND d.available_at <= v_at AND d.id BETWEEN v_qlo AND v_qhi
                ORDER BY d.available_at
                LIMIT w.take_n
                FOR UPDATE SKIP LOCKED
            ) x
        ), ranked AS (
            -- Within a workspace its triggers interleaved: the 1st of each, then the 2nd, ... (ws_rank).
            SELECT l.*, row_number() OVER (PARTITION BY l.workspace_id ORDER BY l.rn, l.trigger_ord) AS ws_rank
            FROM locked l
        )
        -- Then the workspaces interleaved the same way: each gets an equal share of the batch while it has
        -- work (the arrays keep that order).
        SELECT array_agg(l.id ORDER BY l.ord), array_agg(l.trigger_id ORDER BY l.ord),
               array_agg(l.available_at ORDER BY l.ord)
        INTO v_ids, v_triggers, v_due
        FROM (SELECT id, trigger_id, available_at, row_number() OVER (ORDER BY ws_rank, ws_ord) AS ord
              FROM ranked ORDER BY ws_rank, ws_ord LIMIT p_limit) l;
    ELSE
        -- A take of named deliveries (the ones ingress just announced, while nothing waits behind them): each
        -- is read by key, oldest first, and none of the walk above runs. Its own statement, so that not even the
        -- walk's plan is started (its probes step over every index entry that left the queue since the last
        -- vacuum; a few dozen reads by key cost a fraction of that). Its range: the smallest and largest named id.
        FOREACH v_id IN ARRAY p_ids LOOP
            IF v_qlo IS NULL OR v_id < v_qlo THEN
                v_qlo := v_id;
            END IF;
            IF v_qhi IS NULL OR v_id > v_qhi THEN
                v_qhi := v_id;
            END IF;
        END LOOP;
        SELECT array_agg(d.id ORDER BY d.id), array_agg(d.trigger_id ORDER BY d.id), array_agg(d.available_at ORDER BY d.id)
        INTO v_ids, v_triggers, v_due
        FROM (SELECT d.id, d.trigger_id, d.available_at FROM webhook_delivery d
              WHERE d.id = ANY (p_ids) AND d.id BETWEEN v_qlo AND v_qhi AND d.status = 'queued' AND d.available_at <= v_at
              ORDER BY d.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) d;
    END IF;

    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    -- The claimed deliveries in batch order, each with its rank within its trigger (nth) for the pacing below.
    WITH picked AS (
        SELECT p.id, p.trigger_id, p.ord,
               row_number() OVER (PARTITION BY p.trigger_id ORDER BY p.due, p.id) AS nth
        FROM unnest(v_ids, v_triggers, v_due) WITH ORDINALITY AS p(id, trigger_id, due, ord)
    ), paced AS (
        -- One pacing take per trigger of the batch (volatile: the CTE is run once, not inlined).
        SELECT p.trigger_id, g.granted, g.window_end
        FROM (SELECT trigger_id, count(*)::integer AS wanted FROM picked GROUP BY trigger_id) p
        JOIN autopilot_trigger t ON t.id = p.trigger_id
        CROSS JOIN LATERAL hookgate_pace_take(p.trigger_id, p.wanted, t.rate_limit_per_minute, v_at) g
    )
    SELECT array_agg(picked.id ORDER BY picked.ord) FILTER (WHERE picked.nth <= paced.granted),
           array_agg(picked.id) FILTER (WHERE picked.nth > paced.granted),
           array_agg(paced.window_end) FILTER (WHERE picked.nth > paced.granted)
    INTO v_granted, v_over, v_over_until
    FROM picked JOIN paced ON paced.trigger_id = picked.trigger_id;

    -- The rows over their trigger's budget wait for its next window. Its own statement, run only when there are
    -- some: as a writing CTE of the statement above, its plan over every partition was started on every take.
    IF v_over IS NOT NULL THEN
        UPDATE webhook_delivery w
        SET lease_token = NULL, lease_expires_at = NULL, available_at = o.window_end,
            reason_code = 'paced', reason = 'over the trigger''s rate_limit_per_minute: waits for its next window',
            updated_at = now()
        FROM unnest(v_over, v_over_until) AS o(id, window_end)
        WHERE w.id = o.id AND w.id BETWEEN v_qlo AND v_qhi;
    END IF;

    IF v_granted IS NULL THEN
        RETURN;
    END IF;

    -- The plain-pending ones, their runs locked (SKIP LOCKED: one held elsewhere is left to the slow path).
    SELECT array_agg(q.delivery_id ORDER BY q.n), array_agg(q.run_id ORDER BY q.n),
           array_agg(q.agent_id ORDER BY q.n), array_agg(q.pushable ORDER BY q.n), array_agg(q.lease_s ORDER BY q.n),
           array_agg(q.workspace_id ORDER BY q.n)
    INTO v_plain, v_runs, v_agents, v_pushable, v_leases, v_spaces
    FROM (
        SELECT g.n, w.id AS delivery_id, r.id AS run_id, ag.id AS agent_id, ag.runtime_kind = 'http' AS pushable,
               r.workspace_id,
               least(ag.timeout_s, p_lease_cap_s) + p_lease_margin_s AS lease_s
        FROM unnest(v_granted) WITH ORDINALITY AS g(id, n)
        -- One delivery per id, looked up by key first: the partitioned table has no statistics of its own
        -- (autovacuum analyzes only its partitions), the planner guessed dozens of rows per id through a plain
        -- join and started from all the autopilot's pending runs instead, each probing every granted id
        -- (~1 s per take with 5,000 runs; since 0024_partitions).
        CROSS JOIN LATERAL (SELECT w.id, w.run_id FROM webhook_delivery w WHERE w.id = g.id AND w.id BETWEEN v_qlo AND v_qhi LIMIT 1) w
        JOIN autopilot_run r ON r.id = w.run_id
        JOIN autopilot a ON a.id = r.autopilot_id
        CROSS JOIN LATERAL hookgate_assignee_agent(a.assignee_type, a.assignee_id, a.workspace_id) ag
        CROSS JOIN LATERAL hookgate_runtime_ready(ag.id, ag.runtime_kind, ag.endpoint_url, p_heartbeat_s, now()) rt
        -- `r.status || ''`: no index of autopilot_run serves this test, so the runs are reached by key from the
        -- granted deliveries, never the other way round (with statistics that missed a burst of admitted runs,
        -- the planner started from the pending runs and probed every granted id for each: ~1 s a take).
        WHERE r.status || '' = 'pending' AND r.issue_id IS NULL AND r.task_id IS NULL
          AND a.execution_mode = 'run_only' AND ag.archived_at IS NULL AND rt.ready
        FOR UPDATE OF r SKIP LOCKED
    ) q;

    IF v_plain IS NOT NULL THEN
        -- Slots for the first p_claims tasks of HTTP agents, agent by agent, each agent within its room and each
        -- workspace within its own (counted over the tasks its agents' rooms let through); a task without one
        -- stays queued.
        v_tokens := array_fill(NULL::uuid, ARRAY[cardinality(v_plain)]);
        v_slots := array_fill(NULL::integer, ARRAY[cardinality(v_plain)]);
        FOR v_agent, v_at_n IN
            SELECT u.agent_id, array_agg(u.n ORDER BY u.n)
            FROM (SELECT s.agent_id, s.n FROM (
                      SELECT y.agent_id, y.n, y.workspace_id,
                             row_number() OVER (PARTITION BY y.workspace_id ORDER BY y.n) AS wth
                      FROM (SELECT x.agent_id, x.n, x.workspace_id,
                                   row_number() OVER (PARTITION BY x.agent_id ORDER BY x.n) AS nth
                            FROM unnest(v_agents, v_pushable, v_spaces) WITH ORDINALITY
                                AS x(agent_id, pushable, workspace_id, n)
                            WHERE x.pushable) y
                      WHERE y.nth <= coalesce((SELECT z.room FROM unnest(p_room_agents, p_rooms) AS z(agent_id, room)
                                               WHERE z.agent_id = y.agent_id LIMIT 1), p_room_other, p_claims)) s
                  WHERE s.wth <= coalesce((SELECT z.room FROM unnest(p_room_spaces, p_space_rooms) AS z(workspace_id, room)
                                           WHERE z.workspace_id = s.workspace_id LIMIT 1), p_space_other, p_claims)
                  ORDER BY s.n LIMIT greatest(p_claims, 0)) u
            GROUP BY u.agent_id
        LOOP
            v_free := hookgate_slots_take(v_agent, cardinality(v_at_n), p_cap);
            FOR i IN 1 .. coalesce(cardinality(v_free), 0) LOOP
                v_slots[v_at_n[i]] := v_free[i];
                v_tokens[v_at_n[i]] := gen_random_uuid();
            END LOOP;
        END LOOP;

        -- One statement writes the tasks, the slots, the runs, the audit and the deliveries, announces the queued
        -- tasks and returns the dispatched rows: a read-back and a NOTIFY of their own cost two more executor
        -- start-ups per take (the read-back's over every partition of webhook_delivery).
        RETURN QUERY
        WITH x AS (
            SELECT * FROM unnest(v_plain, v_runs, v_agents, v_leases, v_tokens, v_slots) WITH ORDINALITY
                AS x(delivery_id, run_id, agent_id, lease_s, token, slot, n)
        ), made AS (
            -- A claimed task is born running (attempt 1), so it is written once instead of insert + claim.
            INSERT INTO agent_task (workspace_id, run_id, agent_id, payload, max_attempts, idempotency_key, status,
                                    attempt, lease_token, lease_expires_at, holder_instance, started_at,
                                    attempt_started_at, autopilot_id)
            SELECT r.workspace_id, r.id, x.agent_id, r.payload,
                   coalesce(cardinality(ag.retry_schedule) + 1, p_max_attempts), 'run:' || r.id::text || ':1',
                   CASE WHEN x.token IS NULL THEN 'queued' ELSE 'running' END,
                   CASE WHEN x.token IS NULL THEN 0 ELSE 1 END, x.token,
                   CASE WHEN x.token IS NOT NULL THEN v_at + make_interval(secs => x.lease_s) END,
                   CASE WHEN x.token IS NOT NULL THEN p_holder END,
                   CASE WHEN x.token IS NOT NULL THEN now() END, CASE WHEN x.token IS NOT NULL THEN now() END,
                   r.autopilot_id
            FROM x JOIN autopilot_run r ON r.id = x.run_id JOIN agent ag ON ag.id = x.agent_id
            ORDER BY x.n
            ON CONFLICT (idempotency_key) DO NOTHING
            RETURNING id, run_id, workspace_id, agent_id, payload, status, attempt, max_attempts, lease_token,
                      lease_expires_at, autopilot_id
        ), slotted AS (
            UPDATE agent_slot sl SET lease_token = m.lease_token, autopilot_id = m.autopilot_id, served_at = now()
            FROM made m JOIN x ON x.run_id = m.run_id
            WHERE m.lease_token IS NOT NULL AND sl.agent_id = m.agent_id AND sl.slot = x.slot
        ), started AS (
            UPDATE autopilot_run r
            SET task_id = m.id, status = CASE WHEN m.status = 'running' THEN 'running' ELSE 'queued' END,
                updated_at = now()
            FROM made m WHERE r.id = m.run_id
        ), audited AS (
            INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
            SELECT m.workspace_id, 'CLAIM', 'worker', p_holder, 'agent_task', m.id::text,
                   jsonb_build_object('attempt', m.attempt, 'lease_expires_at', m.lease_expires_at, 'run_id', m.run_id)
            FROM made m WHERE m.status = 'running'
        ), completed AS (
            UPDATE webhook_delivery w
            SET status = 'dispatched', lease_token = NULL, lease_expires_at = NULL,
                reason_code = CASE WHEN w.reason_code = 'paced' THEN NULL ELSE w.reason_code END,
                reason = CASE WHEN w.reason_code = 'paced' THEN NULL ELSE w.reason END, updated_at = now()
            FROM made m JOIN x ON x.run_id = m.run_id
            WHERE w.id = x.delivery_id AND w.id BETWEEN v_qlo AND v_qhi
            RETURNING w.id, w.trigger_id, w.event, w.dispatch_attempts, w.received_at
        ), announced AS (
            -- The queued tasks, for the push workers (sent at commit). A plain CTE runs only when read: the
            -- count below reads it, once.
            SELECT pg_notify('hookgate_tasks', m.id::text) FROM made m WHERE m.status = 'queued'
        )
        SELECT 'dispatched'::text, c.id, NULL::uuid, m.workspace_id, c.trigger_id, m.autopilot_id, c.event,
               NULL::jsonb, m.run_id, c.dispatch_attempts, c.received_at, NULL::integer, m.status = 'running', m.id,
               m.agent_id, m.payload, m.attempt, m.max_attempts, m.lease_token, m.lease_expires_at, ag.endpoint_url,
               ag.timeout_s, ag.signing_secret_ct, ap.title, ap.instructions,
               CASE WHEN ag.previous_secret_expires_at > now() THEN ag.previous_secret_ct END
        FROM made m
        JOIN x ON x.run_id = m.run_id
        JOIN completed c ON c.id = x.delivery_id
        JOIN agent ag ON ag.id = m.agent_id
        JOIN autopilot ap ON ap.id = m.autopilot_id
        WHERE (SELECT count(*) FROM announced) >= 0
        ORDER BY x.n;
        GET DIAGNOSTICS v_done = ROW_COUNT;
    END IF;

    -- The rest is leased for the one-by-one path (nothing, most times: the statement costs ~0.2 ms even then).
    IF cardinality(v_granted) = v_done THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH leased AS (
        UPDATE webhook_delivery w
        SET lease_token = gen_random_uuid(), lease_expires_at = v_at + make_interval(secs => p_lease_s),
            available_at = v_at + make_interval(secs => p_lease_s), updated_at = now()
        FROM autopilot_trigger tr
        -- The dispatched ones are no longer queued (written by the statement above).
        WHERE w.id = ANY (v_granted) AND w.id BETWEEN v_qlo AND v_qhi AND w.status = 'queued'
          AND tr.id = w.trigger_id
        RETURNING w.id, w.lease_token, w.workspace_id, w.trigger_id, w.autopilot_id, w.event, w.envelope, w.run_id,
                  w.dispatch_attempts, w.received_at, tr.rate_limit_per_minute
    )
    SELECT 'leased'::text, l.id, l.lease_token, l.workspace_id, l.trigger_id, l.autopilot_id, l.event, l.envelope,
           l.run_id, l.dispatch_attempts, l.received_at, l.rate_limit_per_minute, false, NULL::uuid, NULL::uuid,
           NULL::jsonb, NULL::integer, NULL::integer, NULL::uuid, NULL::timestamptz, NULL::text,
           NULL::double precision, NULL::bytea, NULL::text, NULL::text, NULL::bytea
    FROM leased l;
END
$$;
