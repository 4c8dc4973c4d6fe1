-- 0008_dispatch_take: claim, pace and dispatch a batch of deliveries in one round trip (the worker's hot path).

-- Lock up to p_want free concurrency slots of agent p_agent (ARCHITECTURE §7) and return their numbers; the
-- caller gives each a fresh lease token in the same transaction. The slot rule of hookgate_task_claim_many:
-- lock free slots in slot order from a random start (SKIP LOCKED, so concurrent claimers take different
-- ones), then re-check them with a fresh snapshot (READ COMMITTED, volatile function: a claim committed
-- before our lock is seen, none can come after it). An archived or unknown agent gets none.
CREATE FUNCTION hookgate_slots_take(p_agent uuid, p_want integer)
RETURNS integer[]
LANGUAGE plpgsql AS $$
DECLARE
    cap   integer;
    off   integer;
    free  integer[];
BEGIN
    SELECT max_concurrency INTO cap FROM agent WHERE id = p_agent AND archived_at IS NULL;
    IF NOT FOUND OR coalesce(p_want, 0) <= 0 THEN
        RETURN '{}';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM agent_slot WHERE agent_id = p_agent AND slot = cap - 1) THEN
        INSERT INTO agent_slot (agent_id, slot) SELECT p_agent, g FROM generate_series(0, cap - 1) g
        ON CONFLICT DO NOTHING;
    END IF;
    off := floor(random() * cap)::integer;
    SELECT array_agg(s.slot) INTO free FROM (
        SELECT sl.slot FROM agent_slot sl
        WHERE sl.agent_id = p_agent AND sl.slot >= off AND sl.slot < cap
          AND NOT EXISTS (SELECT 1 FROM agent_task r WHERE r.status = 'running' AND r.lease_token = sl.lease_token)
        ORDER BY sl.slot
        LIMIT p_want
        FOR UPDATE OF sl SKIP LOCKED
    ) s;
    IF coalesce(cardinality(free), 0) < p_want THEN
        SELECT coalesce(free, '{}') || coalesce(array_agg(s.slot), '{}') INTO free FROM (
            SELECT sl.slot FROM agent_slot sl
            WHERE sl.agent_id = p_agent AND sl.slot < off
              AND NOT EXISTS (SELECT 1 FROM agent_task r WHERE r.status = 'running'
                                AND r.lease_token = sl.lease_token)
            ORDER BY sl.slot
            LIMIT p_want - coalesce(cardinality(free), 0)
            FOR UPDATE OF sl SKIP LOCKED
        ) s;
    END IF;
    IF coalesce(cardinality(free), 0) = 0 THEN
        RETURN '{}';
    END IF;
    -- Fresh snapshot: which of the slots we now hold are still free?
    SELECT array_agg(sl.slot ORDER BY sl.slot) INTO free FROM agent_slot sl
    WHERE sl.agent_id = p_agent AND sl.slot = ANY (free)
      AND NOT EXISTS (SELECT 1 FROM agent_task r WHERE r.status = 'running' AND r.lease_token = sl.lease_token);
    RETURN coalesce(free, '{}');
END
$$;

-- The delivery worker's claim and dispatch in one statement. Claim exactly like delivery_claim_paced: up to
-- p_limit due queued deliveries, round-robin across at most p_fanout triggers after cursor p_cursor, locked
-- FOR UPDATE SKIP LOCKED, one pacing grant per trigger (hookgate_pace_take), rows over their trigger's budget
-- released to the window's end without spending an attempt. Then, without writing a lease on them, dispatch
-- every granted delivery whose admitted run is still plain 'pending' in run_only mode with an unarchived agent
-- whose runtime is ready (what ingress stores; the conditions of hookgate_dispatch_pending): the delivery row
-- is locked by this transaction from the claim to its 'dispatched' write, which is what the lease token
-- guards in the two-step path. Runs are locked SKIP LOCKED (a run another dispatcher holds goes to the
-- one-by-one path, which waits for it). The first p_claims tasks of HTTP agents that get a free slot
-- (hookgate_slots_take) are inserted already 'running' with a fresh lease token for p_holder, leased
-- least(agent timeout, p_lease_cap_s) + p_lease_margin_s, audited CLAIM, their runs 'running'; the other
-- tasks are inserted 'queued' (runs 'queued') and announced on hookgate_tasks. One task per run attempt:
-- idempotency key 'run:<run id>:1' (ON CONFLICT DO NOTHING; such a delivery is leased, not dispatched).
-- Every other granted delivery (crash window, create_issue, skipped, half-made, run locked elsewhere) is
-- leased for p_lease_s seconds and returned for the one-by-one path. p_at: clock override (nullable).
-- Returns one row per granted delivery: kind 'dispatched' (task columns set; claimed = its lease is ours)
-- or 'leased' (the delivery columns of delivery_claim_paced).
CREATE FUNCTION hookgate_delivery_take(
    p_limit integer, p_lease_s double precision, p_cursor uuid, p_fanout integer, p_at timestamptz,
    p_max_attempts integer, p_heartbeat_s double precision, p_holder text, p_claims integer,
    p_lease_cap_s double precision, p_lease_margin_s double precision)
RETURNS TABLE (kind text, id uuid, lease_token uuid, workspace_id uuid, trigger_id uuid, autopilot_id uuid,
               event text, envelope jsonb, run_id uuid, dispatch_attempts integer, received_at timestamptz,
               rate_limit_per_minute integer, claimed boolean, task_id uuid, agent_id uuid, payload jsonb,
               attempt integer, max_attempts integer, task_lease_token uuid, lease_expires_at timestamptz,
               endpoint_url text, timeout_s double precision, signing_secret_ct bytea, autopilot_title text,
               autopilot_instructions text)
LANGUAGE plpgsql
-- Generic plans: the statements here are index lookups by key whatever the arguments, and planning them
-- anew on every call (PostgreSQL keeps custom plans when a generic one looks costlier on paper) cost
-- ~0.5 ms of server CPU per call, more than the work itself for a batch of one.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_at       timestamptz := coalesce(p_at, now());
    v_granted  uuid[];
    v_plain    uuid[];
    v_runs     uuid[];
    v_agents   uuid[];
    v_pushable boolean[];
    v_leases   double precision[];
    v_tokens   uuid[];
    v_slots    integer[];
    v_agent    uuid;
    v_at_n     integer[];
    v_free     integer[];
    v_done     uuid[];
    v_tasks    uuid[];
    v_queued   uuid[];
BEGIN
    WITH RECURSIVE heads AS (
        (SELECT d.trigger_id, 1 AS depth FROM webhook_delivery d
         WHERE d.status = 'queued' AND d.available_at <= v_at AND (p_cursor IS NULL OR d.trigger_id > p_cursor)
         ORDER BY d.trigger_id LIMIT 1)
        UNION ALL
        SELECT (SELECT d.trigger_id FROM webhook_delivery d
                WHERE d.status = 'queued' AND d.available_at <= v_at AND d.trigger_id > h.trigger_id
                ORDER BY d.trigger_id LIMIT 1), h.depth + 1
        FROM heads h WHERE h.trigger_id IS NOT NULL AND h.depth < p_fanout
    ), locked AS (
        -- Ordered by the (trigger_id, available_at) index, so each trigger's head is read, not its backlog.
        SELECT x.id, x.trigger_id, x.available_at,
               row_number() OVER (PARTITION BY x.trigger_id ORDER BY x.available_at) AS rn
        FROM heads h CROSS JOIN LATERAL (
            SELECT d.id, d.trigger_id, d.available_at FROM webhook_delivery d
            WHERE d.trigger_id = h.trigger_id AND d.status = 'queued' AND d.available_at <= v_at
            ORDER BY d.available_at
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ) x
        WHERE h.trigger_id IS NOT NULL
    ), picked AS (
        -- Interleaved: the 1st of each trigger, then the 2nd, ... (ord keeps that order for the result).
        SELECT l.id, l.trigger_id, l.ord,
               row_number() OVER (PARTITION BY l.trigger_id ORDER BY l.available_at, l.id) AS nth
        FROM (SELECT id, trigger_id, available_at, row_number() OVER (ORDER BY rn, available_at) AS ord
              FROM locked ORDER BY rn, available_at LIMIT p_limit) l
    ), paced AS (
        -- One pacing take per trigger of the batch (volatile: run once, before the update below reads it).
        SELECT p.trigger_id, g.granted, g.window_end
        FROM (SELECT trigger_id, count(*)::integer AS wanted FROM picked GROUP BY trigger_id) p
        JOIN autopilot_trigger t ON t.id = p.trigger_id
        CROSS JOIN LATERAL hookgate_pace_take(p.trigger_id, p.wanted, t.rate_limit_per_minute, v_at) g
    ), deferred AS (
        UPDATE webhook_delivery w
        SET lease_token = NULL, lease_expires_at = NULL, available_at = paced.window_end, updated_at = now()
        FROM picked JOIN paced ON paced.trigger_id = picked.trigger_id
        WHERE w.id = picked.id AND picked.nth > paced.granted
    )
    SELECT array_agg(picked.id ORDER BY picked.ord) INTO v_granted
    FROM picked JOIN paced ON paced.trigger_id = picked.trigger_id
    WHERE picked.nth <= paced.granted;

    IF v_granted IS NULL THEN
        RETURN;
    END IF;

    -- The plain-pending ones, their runs locked (SKIP LOCKED: one held elsewhere is left to the slow path).
    SELECT array_agg(q.delivery_id ORDER BY q.n), array_agg(q.run_id ORDER BY q.n),
           array_agg(q.agent_id ORDER BY q.n), array_agg(q.pushable ORDER BY q.n), array_agg(q.lease_s ORDER BY q.n)
    INTO v_plain, v_runs, v_agents, v_pushable, v_leases
    FROM (
        SELECT g.n, w.id AS delivery_id, r.id AS run_id, ag.id AS agent_id, ag.runtime_kind = 'http' AS pushable,
               least(ag.timeout_s, p_lease_cap_s) + p_lease_margin_s AS lease_s
        FROM unnest(v_granted) WITH ORDINALITY AS g(id, n)
        JOIN webhook_delivery w ON w.id = g.id
        JOIN autopilot_run r ON r.id = w.run_id
        JOIN autopilot a ON a.id = r.autopilot_id
        LEFT JOIN squad s ON a.assignee_type = 'squad' AND s.id = a.assignee_id
        JOIN agent ag ON ag.id = CASE WHEN a.assignee_type = 'agent' THEN a.assignee_id ELSE s.leader_agent_id END
                     AND ag.workspace_id = a.workspace_id AND ag.archived_at IS NULL
        WHERE r.status = 'pending' AND r.issue_id IS NULL AND r.task_id IS NULL AND a.execution_mode = 'run_only'
          AND CASE WHEN ag.runtime_kind = 'http' THEN ag.endpoint_url IS NOT NULL
                   ELSE EXISTS (SELECT 1 FROM agent_instance i
                                WHERE i.agent_id = ag.id AND i.status = 'online'
                                  AND i.heartbeat_at > now() - make_interval(secs => p_heartbeat_s))
              END
        FOR UPDATE OF r SKIP LOCKED
    ) q;

    IF v_plain IS NOT NULL THEN
        -- Slots for the first p_claims tasks of HTTP agents, agent by agent; a task without one stays queued.
        v_tokens := array_fill(NULL::uuid, ARRAY[cardinality(v_plain)]);
        v_slots := array_fill(NULL::integer, ARRAY[cardinality(v_plain)]);
        FOR v_agent, v_at_n IN
            SELECT u.agent_id, array_agg(u.n ORDER BY u.n)
            FROM (SELECT x.agent_id, x.n FROM unnest(v_agents, v_pushable) WITH ORDINALITY AS x(agent_id, pushable, n)
                  WHERE x.pushable ORDER BY x.n LIMIT greatest(p_claims, 0)) u
            GROUP BY u.agent_id
        LOOP
            v_free := hookgate_slots_take(v_agent, cardinality(v_at_n));
            FOR i IN 1 .. coalesce(cardinality(v_free), 0) LOOP
                v_slots[v_at_n[i]] := v_free[i];
                v_tokens[v_at_n[i]] := gen_random_uuid();
            END LOOP;
        END LOOP;

        WITH x AS (
            SELECT * FROM unnest(v_plain, v_runs, v_agents, v_leases, v_tokens, v_slots) WITH ORDINALITY
                AS x(delivery_id, run_id, agent_id, lease_s, token, slot, n)
        ), made AS (
            -- A claimed task is born running (attempt 1), so it is written once instead of insert + claim.
            INSERT INTO agent_task (workspace_id, run_id, agent_id, payload, max_attempts, idempotency_key, status,
                                    attempt, lease_token, lease_expires_at, holder_instance, started_at)
            SELECT r.workspace_id, r.id, x.agent_id, r.payload, p_max_attempts, 'run:' || r.id::text || ':1',
                   CASE WHEN x.token IS NULL THEN 'queued' ELSE 'running' END,
                   CASE WHEN x.token IS NULL THEN 0 ELSE 1 END, x.token,
                   CASE WHEN x.token IS NOT NULL THEN v_at + make_interval(secs => x.lease_s) END,
                   CASE WHEN x.token IS NOT NULL THEN p_holder END,
                   CASE WHEN x.token IS NOT NULL THEN now() END
            FROM x JOIN autopilot_run r ON r.id = x.run_id
            ORDER BY x.n
            ON CONFLICT (idempotency_key) DO NOTHING
            RETURNING id, run_id, workspace_id, agent_id, status, attempt, lease_token, lease_expires_at
        ), slotted AS (
            UPDATE agent_slot sl SET lease_token = m.lease_token
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
            SET status = 'dispatched', lease_token = NULL, lease_expires_at = NULL, updated_at = now()
            FROM made m JOIN x ON x.run_id = m.run_id
            WHERE w.id = x.delivery_id
        )
        SELECT array_agg(x.delivery_id ORDER BY x.n), array_agg(m.id ORDER BY x.n),
               array_agg(m.id) FILTER (WHERE m.status = 'queued')
        INTO v_done, v_tasks, v_queued
        FROM made m JOIN x ON x.run_id = m.run_id;

        PERFORM pg_notify('hookgate_tasks', t::text) FROM unnest(v_queued) AS t;
    END IF;

    RETURN QUERY
    SELECT 'dispatched'::text, w.id, NULL::uuid, t.workspace_id, w.trigger_id, r.autopilot_id, w.event, NULL::jsonb,
           t.run_id, w.dispatch_attempts, w.received_at, NULL::integer, t.status = 'running', t.id, t.agent_id,
           t.payload, t.attempt, t.max_attempts, t.lease_token, t.lease_expires_at, ag.endpoint_url, ag.timeout_s,
           ag.signing_secret_ct, ap.title, ap.instructions
    FROM unnest(v_done, v_tasks) WITH ORDINALITY AS x(delivery_id, task_id, n)
    JOIN webhook_delivery w ON w.id = x.delivery_id
    JOIN agent_task t ON t.id = x.task_id
    JOIN agent ag ON ag.id = t.agent_id
    JOIN autopilot_run r ON r.id = t.run_id
    JOIN autopilot ap ON ap.id = r.autopilot_id
    ORDER BY x.n;

    -- The rest is leased like delivery_claim_paced leases it, for the one-by-one path.
    RETURN QUERY
    WITH leased AS (
        UPDATE webhook_delivery w
        SET lease_token = gen_random_uuid(), lease_expires_at = v_at + make_interval(secs => p_lease_s),
            available_at = v_at + make_interval(secs => p_lease_s), updated_at = now()
        FROM autopilot_trigger tr
        WHERE w.id = ANY (v_granted) AND w.id <> ALL (coalesce(v_done, '{}')) AND w.status = 'queued'
          AND tr.id = w.trigger_id
        RETURNING w.id, w.lease_token, w.workspace_id, w.trigger_id, w.autopilot_id, w.event, w.envelope, w.run_id,
                  w.dispatch_attempts, w.received_at, tr.rate_limit_per_minute
    )
    SELECT 'leased'::text, l.id, l.lease_token, l.workspace_id, l.trigger_id, l.autopilot_id, l.event, l.envelope,
           l.run_id, l.dispatch_attempts, l.received_at, l.rate_limit_per_minute, false, NULL::uuid, NULL::uuid,
           NULL::jsonb, NULL::integer, NULL::integer, NULL::uuid, NULL::timestamptz, NULL::text,
           NULL::double precision, NULL::bytea, NULL::text, NULL::text
    FROM leased l;
END
$$;
