-- 0020_fair_claims: fair share past the delivery claim.
--
-- agent_task.autopilot_id: the autopilot of the task's run, copied when the task is made (the take,
-- task_insert_for_run), so a claim can take an agent's queued tasks round-robin across the autopilots that
-- feed it (hookgate_task_claim) by index, without joining the runs. No foreign key: a denormalised copy of
-- autopilot_run.autopilot_id (which has one). Filled here for the tasks that can still be claimed or are
-- running; finished ones keep NULL (nothing reads it there).
ALTER TABLE agent_task ADD COLUMN autopilot_id uuid;
UPDATE agent_task t SET autopilot_id = r.autopilot_id
FROM autopilot_run r
WHERE r.id = t.run_id AND t.status IN ('queued', 'running') AND t.autopilot_id IS NULL;
-- An agent's queued tasks by feed, oldest first within each (id breaks ties of one batch's equal times): the
-- claim's loose index scan over the feeds and its heads.
CREATE INDEX agent_task_fair_idx ON agent_task (agent_id, autopilot_id, available_at, id) WHERE status = 'queued';

-- agent_slot: whom a slot served last and when, written by the claim that gives it a lease token anyway; the
-- claim serves the least recently served autopilot first, and the push worker the least recently served agent.
ALTER TABLE agent_slot ADD COLUMN autopilot_id uuid, ADD COLUMN served_at timestamptz;

-- hookgate_delivery_take: the tasks born claimed are capped per agent by the pusher's fair share.
DROP FUNCTION hookgate_delivery_take(integer, double precision, uuid, integer, timestamptz, integer,
                                     double precision, text, integer, double precision, double precision);

CREATE OR REPLACE FUNCTION hookgate_delivery_take(
    p_limit integer, p_lease_s double precision, p_cursor uuid, p_fanout integer, p_at timestamptz,
    p_max_attempts integer, p_heartbeat_s double precision, p_holder text, p_claims integer,
    p_lease_cap_s double precision, p_lease_margin_s double precision, p_room_agents uuid[], p_rooms integer[],
    p_room_other integer)
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
        SET lease_token = NULL, lease_expires_at = NULL, available_at = paced.window_end,
            reason_code = 'paced', reason = 'over the trigger''s rate_limit_per_minute: waits for its next window',
            updated_at = now()
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
        CROSS JOIN LATERAL hookgate_assignee_agent(a.assignee_type, a.assignee_id, a.workspace_id) ag
        CROSS JOIN LATERAL hookgate_runtime_ready(ag.id, ag.runtime_kind, ag.endpoint_url, p_heartbeat_s, now()) rt
        WHERE r.status = 'pending' AND r.issue_id IS NULL AND r.task_id IS NULL AND a.execution_mode = 'run_only'
          AND ag.archived_at IS NULL AND rt.ready
        FOR UPDATE OF r SKIP LOCKED
    ) q;

    IF v_plain IS NOT NULL THEN
        -- Slots for the first p_claims tasks of HTTP agents, agent by agent; a task without one stays queued.
        v_tokens := array_fill(NULL::uuid, ARRAY[cardinality(v_plain)]);
        v_slots := array_fill(NULL::integer, ARRAY[cardinality(v_plain)]);
        FOR v_agent, v_at_n IN
            SELECT u.agent_id, array_agg(u.n ORDER BY u.n)
            FROM (SELECT y.agent_id, y.n FROM (
                      SELECT x.agent_id, x.n, row_number() OVER (PARTITION BY x.agent_id ORDER BY x.n) AS nth
                      FROM unnest(v_agents, v_pushable) WITH ORDINALITY AS x(agent_id, pushable, n)
                      WHERE x.pushable) y
                  WHERE y.nth <= coalesce((SELECT z.room FROM unnest(p_room_agents, p_rooms) AS z(agent_id, room)
                                           WHERE z.agent_id = y.agent_id LIMIT 1), p_room_other, p_claims)
                  ORDER BY y.n LIMIT greatest(p_claims, 0)) u
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
            RETURNING id, run_id, workspace_id, agent_id, status, attempt, lease_token, lease_expires_at, autopilot_id
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
           ag.signing_secret_ct, ap.title, ap.instructions,
           CASE WHEN ag.previous_secret_expires_at > now() THEN ag.previous_secret_ct END
    FROM unnest(v_done, v_tasks) WITH ORDINALITY AS x(delivery_id, task_id, n)
    JOIN webhook_delivery w ON w.id = x.delivery_id
    JOIN agent_task t ON t.id = x.task_id
    JOIN agent ag ON ag.id = t.agent_id
    JOIN autopilot_run r ON r.id = t.run_id
    JOIN autopilot ap ON ap.id = r.autopilot_id
    ORDER BY x.n;

    -- The rest is leased for the one-by-one path.
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
           NULL::double precision, NULL::bytea, NULL::text, NULL::text, NULL::bytea
    FROM leased l;
END
$$;
