-- 0005_perf: the set-based fast path of delivery dispatch, one round trip per claimed batch.

-- Claim the given queued, due tasks p_tasks of agent p_agent (in that order) for p_holder, as many as the
-- agent has free concurrency slots (ARCHITECTURE §7), each leased for p_lease_s seconds from p_at. The same slot
-- rule as hookgate_task_claim, for many tasks in a few statements: lock free slots (SKIP LOCKED), re-check
-- them with a fresh snapshot (READ COMMITTED, volatile function: a claim committed before our lock is seen,
-- none can come after it), lock the tasks, then give each task a slot and a fresh lease token.
CREATE FUNCTION hookgate_task_claim_many(p_agent uuid, p_tasks uuid[], p_lease_s double precision,
                                         p_holder text, p_at timestamptz)
RETURNS SETOF agent_task
LANGUAGE plpgsql AS $$
DECLARE
    cap    integer;
    off    integer;
    free   integer[];
    todo   uuid[];
BEGIN
    SELECT max_concurrency INTO cap FROM agent WHERE id = p_agent AND archived_at IS NULL;
    IF NOT FOUND OR coalesce(cardinality(p_tasks), 0) = 0 THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM agent_slot WHERE agent_id = p_agent AND slot = cap - 1) THEN
        INSERT INTO agent_slot (agent_id, slot) SELECT p_agent, g FROM generate_series(0, cap - 1) g
        ON CONFLICT DO NOTHING;
    END IF;
    -- From a random slot on, so concurrent claimers rarely probe the same busy slots.
    off := floor(random() * cap)::integer;
    -- In slot order (the primary key), so a batch probes about as many slots as it has tasks.
    SELECT array_agg(s.slot) INTO free FROM (
        SELECT sl.slot FROM agent_slot sl
        WHERE sl.agent_id = p_agent AND sl.slot >= off AND sl.slot < cap
          AND NOT EXISTS (SELECT 1 FROM agent_task r WHERE r.status = 'running' AND r.lease_token = sl.lease_token)
        ORDER BY sl.slot
        LIMIT cardinality(p_tasks)
        FOR UPDATE OF sl SKIP LOCKED
    ) s;
    IF coalesce(cardinality(free), 0) < cardinality(p_tasks) THEN
        SELECT coalesce(free, '{}') || coalesce(array_agg(s.slot), '{}') INTO free FROM (
            SELECT sl.slot FROM agent_slot sl
            WHERE sl.agent_id = p_agent AND sl.slot < off
              AND NOT EXISTS (SELECT 1 FROM agent_task r WHERE r.status = 'running'
                                AND r.lease_token = sl.lease_token)
            ORDER BY sl.slot
            LIMIT cardinality(p_tasks) - coalesce(cardinality(free), 0)
            FOR UPDATE OF sl SKIP LOCKED
        ) s;
    END IF;
    -- Fresh snapshot: which of the slots we now hold are still free?
    SELECT array_agg(sl.slot ORDER BY sl.slot) INTO free FROM agent_slot sl
    WHERE sl.agent_id = p_agent AND sl.slot = ANY (free)
      AND NOT EXISTS (SELECT 1 FROM agent_task r WHERE r.status = 'running' AND r.lease_token = sl.lease_token);
    IF free IS NULL THEN
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

-- Dispatch the leased deliveries p_ids (lease tokens p_tokens, parallel arrays) whose admitted run is still
-- plain 'pending' (no issue, no task) in run_only mode, with an unarchived agent whose runtime is ready (a
-- squad resolves to its leader; p_heartbeat_s = runtime heartbeat timeout): lock the deliveries (id + lease
-- token + status queued) and the runs, make each run's task (idempotency key 'run:<run id>:1'), set the run
-- queued with it, mark the delivery dispatched. Then claim up to p_claims of the new tasks of HTTP agents
-- for p_holder, with hookgate_task_claim_many once per agent (the slot rule of hookgate_task_claim), each leased for least(agent timeout, p_lease_cap_s) + p_lease_margin_s, its run
-- running and a CLAIM audit row; NOTIFY hookgate_tasks for the tasks left queued. Every other delivery of the
-- batch (crash window, create_issue, skipped, half-made, lost lease) is left untouched for the one-by-one
-- path. Returns one row per dispatched delivery; the task columns are those of task_claim, the lease token
-- only for a task claimed here (claimed = true).
CREATE FUNCTION hookgate_dispatch_pending(
    p_ids uuid[], p_tokens uuid[], p_max_attempts integer, p_heartbeat_s double precision, p_holder text,
    p_claims integer, p_lease_cap_s double precision, p_lease_margin_s double precision)
RETURNS TABLE (delivery_id uuid, claimed boolean, id uuid, workspace_id uuid, run_id uuid, agent_id uuid,
               payload jsonb, attempt integer, max_attempts integer, lease_token uuid,
               lease_expires_at timestamptz, endpoint_url text, timeout_s double precision,
               signing_secret_ct bytea, autopilot_id uuid, autopilot_title text, autopilot_instructions text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_deliveries uuid[];
    v_tasks      uuid[];
    v_agents     uuid[];
    v_pushable   boolean[];
    v_leases     double precision[];
    v_won        uuid[] := '{}';
    v_agent      uuid;
    v_group      uuid[];
    v_lease      double precision;
BEGIN
    WITH mine AS (
        SELECT w.id, w.run_id
        FROM unnest(p_ids, p_tokens) AS x(id, token)
        JOIN webhook_delivery w ON w.id = x.id AND w.lease_token = x.token AND w.status = 'queued'
        WHERE w.run_id IS NOT NULL
        FOR UPDATE OF w
    ), runs AS (
        SELECT r.id, r.workspace_id, r.payload, m.id AS delivery_id, ag.id AS agent_id,
               ag.runtime_kind = 'http' AS pushable, least(ag.timeout_s, p_lease_cap_s) + p_lease_margin_s AS lease_s
        FROM mine m
        JOIN autopilot_run r ON r.id = m.run_id
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
        FOR UPDATE OF r
    ), made AS (
        INSERT INTO agent_task (workspace_id, run_id, agent_id, payload, max_attempts, idempotency_key)
        SELECT workspace_id, id, agent_id, payload, p_max_attempts, 'run:' || id::text || ':1' FROM runs
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING id, run_id
    ), queued AS (
        UPDATE autopilot_run r SET task_id = made.id, status = 'queued', updated_at = now()
        FROM made WHERE r.id = made.run_id
    ), completed AS (
        UPDATE webhook_delivery w
        SET status = 'dispatched', lease_token = NULL, lease_expires_at = NULL, updated_at = now()
        FROM made JOIN runs ON runs.id = made.run_id
        WHERE w.id = runs.delivery_id
    )
    SELECT array_agg(runs.delivery_id), array_agg(made.id), array_agg(runs.agent_id), array_agg(runs.pushable),
           array_agg(runs.lease_s)
    INTO v_deliveries, v_tasks, v_agents, v_pushable, v_leases
    FROM made JOIN runs ON runs.id = made.run_id;

    -- The first p_claims tasks of HTTP agents, claimed agent by agent (one lease length per agent).
    FOR v_agent, v_group, v_lease IN
        SELECT u.agent_id, array_agg(u.task_id ORDER BY u.n), min(u.lease_s)
        FROM (SELECT * FROM unnest(v_agents, v_tasks, v_pushable, v_leases) WITH ORDINALITY
                            AS x(agent_id, task_id, pushable, lease_s, n)
              WHERE x.pushable ORDER BY x.n LIMIT p_claims) u
        GROUP BY u.agent_id
    LOOP
        WITH claimed AS (
            SELECT * FROM hookgate_task_claim_many(v_agent, v_group, v_lease, p_holder, now())
        ), started AS (
            UPDATE autopilot_run r SET status = 'running', updated_at = now()
            FROM claimed c WHERE r.id = c.run_id AND r.status IN ('pending', 'issue_created', 'queued')
        ), audited AS (
            INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
            SELECT c.workspace_id, 'CLAIM', 'worker', p_holder, 'agent_task', c.id::text,
                   jsonb_build_object('attempt', c.attempt, 'lease_expires_at', c.lease_expires_at, 'run_id', c.run_id)
            FROM claimed c
        )
        SELECT v_won || coalesce(array_agg(c.id), '{}') INTO v_won FROM claimed c;
    END LOOP;
    PERFORM pg_notify('hookgate_tasks', t::text) FROM unnest(v_tasks) AS t WHERE t <> ALL (v_won);

    RETURN QUERY
    SELECT x.delivery_id, t.id = ANY (v_won), t.id, t.workspace_id, t.run_id, t.agent_id, t.payload, t.attempt,
           t.max_attempts, CASE WHEN t.id = ANY (v_won) THEN t.lease_token END, t.lease_expires_at,
           ag.endpoint_url, ag.timeout_s, ag.signing_secret_ct, ap.id, ap.title, ap.instructions
    FROM unnest(v_deliveries, v_tasks) AS x(delivery_id, task_id)
    JOIN agent_task t ON t.id = x.task_id
    JOIN agent ag ON ag.id = t.agent_id
    LEFT JOIN autopilot_run r ON r.id = t.run_id
    LEFT JOIN autopilot ap ON ap.id = r.autopilot_id;
END
$$;
