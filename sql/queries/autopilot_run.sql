-- name: admission_facts
-- Everything ingress step 9 and the admission gate (ARCHITECTURE §6) need, for many admissions in one
-- statement: statuses, the trigger's event and payload filters, the resolved agent (a squad resolves to its leader), its
-- readiness, and who is accountable (autopilot/admission.py Facts). Parallel arrays, one element per
-- admission: $1 = autopilot ids, $2 = trigger ids (NULL elements: none), $3 = manual clickers (NULL elements:
-- none). $4 = runtime heartbeat timeout in seconds. One row per admission whose autopilot exists, in array
-- order (x.n); one admission passes one-element arrays.
SELECT x.n, a.id AS autopilot_id, a.workspace_id, a.status AS autopilot_status, a.execution_mode,
       a.assignee_type, a.assignee_id, a.created_by,
       t.id AS trigger_id, t.enabled AS trigger_enabled, (t.deleted_at IS NOT NULL) AS trigger_deleted,
       t.event_filters, t.payload_filter, t.published_by_id AS trigger_publisher_id,
       rv.id AS rule_version_id, rv.publisher_id AS rule_publisher_id,
       ag.id AS agent_id, ag.archived_at IS NOT NULL AS agent_archived, ag.runtime_kind,
       ag.visibility AS agent_visibility, ag.owner_id AS agent_owner_id,
       rt.ready AS runtime_ready,
       (SELECT id FROM member o WHERE o.workspace_id = a.workspace_id AND o.role = 'owner'
          AND o.disabled_at IS NULL ORDER BY o.created_at, o.id LIMIT 1) AS owner_id,
       clicker.id AS clicker_id, clicker.role AS clicker_role,
       (clicker.id IS NOT NULL AND (clicker.id = a.created_by OR clicker.role IN ('owner', 'admin')
           OR EXISTS (SELECT 1 FROM autopilot_collaborator c
                      WHERE c.autopilot_id = a.id AND c.member_id = clicker.id))) AS clicker_can_write,
       publisher.id AS publisher_live_id
FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) WITH ORDINALITY AS x(autopilot_id, trigger_id, clicker_id, n)
JOIN autopilot a ON a.id = x.autopilot_id
LEFT JOIN autopilot_trigger t ON t.id = x.trigger_id AND t.autopilot_id = a.id
LEFT JOIN LATERAL (SELECT id, publisher_id FROM autopilot_rule_version v
                   WHERE v.autopilot_id = a.id ORDER BY v.version DESC LIMIT 1) rv ON true
LEFT JOIN LATERAL hookgate_assignee_agent(a.assignee_type, a.assignee_id, a.workspace_id) ag ON true
CROSS JOIN LATERAL hookgate_runtime_ready(ag.id, ag.runtime_kind, ag.endpoint_url, $4, now()) rt
LEFT JOIN member clicker ON clicker.id = x.clicker_id AND clicker.workspace_id = a.workspace_id
                        AND clicker.disabled_at IS NULL
LEFT JOIN member publisher ON publisher.id = coalesce(t.published_by_id, rv.publisher_id)
                          AND publisher.disabled_at IS NULL
ORDER BY x.n;

-- name: run_insert_many
-- Admit runs in one statement (autopilot/admission.py), idempotently: a run whose delivery or
-- (trigger, planned_at) already has one is not inserted (its row here has a NULL id; the caller reads the
-- existing run). Parallel arrays, one element per run: $1 = workspaces, $2 = autopilots, $3 = triggers,
-- $4 = deliveries, $5 = sources, $6 = statuses ('pending' or 'skipped'), $7 = rule versions, $8 = planned_at,
-- $9 = payloads, $10 = originators, $11 = accountable members, $12 = reason codes, $13 = reasons. Inserted in
-- (trigger, planned_at) order, so concurrent batches take the unique index's locks in one order. Returns one
-- row per run in array order: n, id, status, reason_code.
WITH x AS (
    SELECT r.*, hookgate_uuid7() AS id  -- the column's default, made here to tell which rows were inserted
    FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::uuid[],
                $8::timestamptz[], $9::jsonb[], $10::uuid[], $11::uuid[], $12::text[], $13::text[])
        WITH ORDINALITY AS r(workspace_id, autopilot_id, trigger_id, delivery_id, source, status, rule_version_id,
                             planned_at, payload, originator_id, accountable_id, reason_code, reason, n)
), made AS (
    INSERT INTO autopilot_run (id, workspace_id, autopilot_id, trigger_id, webhook_delivery_id, source, status,
                               rule_version_id, planned_at, payload, originator_id, accountable_id,
                               reason_code, reason, finished_at)
    SELECT id, workspace_id, autopilot_id, trigger_id, delivery_id, source, status, rule_version_id, planned_at,
           payload, originator_id, accountable_id, reason_code, reason, CASE WHEN status = 'skipped' THEN now() END
    FROM x
    ORDER BY trigger_id, planned_at, n
    ON CONFLICT DO NOTHING
    RETURNING id, status, reason_code
)
SELECT x.n, made.id, made.status, made.reason_code FROM x LEFT JOIN made USING (id) ORDER BY x.n;

-- name: run_get_by_delivery
-- The run admitted for delivery $1, if any.
SELECT id, status, reason_code, reason FROM autopilot_run WHERE webhook_delivery_id = $1;

-- name: run_get_by_plan
-- The run admitted for occurrence ($1 trigger, $2 planned_at), if any.
SELECT id, status, reason_code, reason FROM autopilot_run WHERE trigger_id = $1 AND planned_at = $2;

-- name: run_get
-- One run of a workspace. $1 = workspace, $2 = run id.
SELECT * FROM autopilot_run WHERE workspace_id = $1 AND id = $2;

-- name: run_lock_for_dispatch
-- Lock run $1 for dispatch (concurrent dispatchers of one run queue up here; the loser sees the work done)
-- with what dispatch needs: the autopilot, the agent it resolves to (a squad resolves to its leader),
-- whether that agent's runtime is ready, and whether the run is a buffered one (overlap policy buffer_one)
-- that must still wait for an older unfinished run of its trigger. $2 = runtime heartbeat timeout in seconds.
SELECT r.id, r.workspace_id, r.autopilot_id, r.status, r.payload, r.issue_id, r.task_id, r.source,
       a.title, a.instructions, a.execution_mode, a.assignee_type, a.assignee_id, a.issue_title_template,
       ag.id AS agent_id, ag.archived_at IS NOT NULL AS agent_archived, ag.runtime_kind, ag.timeout_s,
       rt.ready AS runtime_ready,
       (r.reason_code = 'buffered' AND EXISTS (
           SELECT 1 FROM autopilot_run o
           WHERE o.trigger_id = r.trigger_id AND o.status IN ('pending', 'issue_created', 'queued', 'running')
             AND (o.created_at, o.id) < (r.created_at, r.id))) AS waiting
FROM autopilot_run r
JOIN autopilot a ON a.id = r.autopilot_id
LEFT JOIN LATERAL hookgate_assignee_agent(a.assignee_type, a.assignee_id, a.workspace_id) ag ON true
CROSS JOIN LATERAL hookgate_runtime_ready(ag.id, ag.runtime_kind, ag.endpoint_url, $2, now()) rt
WHERE r.id = $1
FOR UPDATE OF r;

-- name: run_set_issue
-- Run $1 got its issue $2 (create_issue mode): pending -> issue_created. A buffered run no longer waits.
UPDATE autopilot_run
SET issue_id = $2, status = CASE WHEN status = 'pending' THEN 'issue_created' ELSE status END,
    reason_code = CASE WHEN reason_code = 'buffered' THEN NULL ELSE reason_code END,
    reason = CASE WHEN reason_code = 'buffered' THEN NULL ELSE reason END, updated_at = now()
WHERE id = $1
RETURNING status;

-- name: run_set_task
-- Run $1 got its task $2: pending/issue_created -> queued. A buffered run no longer waits.
UPDATE autopilot_run
SET task_id = $2, status = CASE WHEN status IN ('pending', 'issue_created') THEN 'queued' ELSE status END,
    reason_code = CASE WHEN reason_code = 'buffered' THEN NULL ELSE reason_code END,
    reason = CASE WHEN reason_code = 'buffered' THEN NULL ELSE reason END, updated_at = now()
WHERE id = $1
RETURNING status;

-- name: run_skip
-- Dispatch found the run cannot proceed: $1 run, $2 reason code, $3 reason. Only an unfinished run.
UPDATE autopilot_run
SET status = 'skipped', reason_code = $2, reason = $3, finished_at = now(), updated_at = now()
WHERE id = $1 AND status IN ('pending', 'issue_created', 'queued')
RETURNING id;

-- name: run_finish
-- A run ends from a downstream fact: $1 run, $2 status (completed|failed|cancelled), $3 reason code,
-- $4 reason. A run that already ended keeps its first ending. Returns the run as it ended (what a
-- run.failed alert says), none if it had ended already.
UPDATE autopilot_run
SET status = $2, reason_code = coalesce($3, reason_code), reason = coalesce($4, reason),
    finished_at = now(), updated_at = now()
WHERE id = $1 AND status NOT IN ('completed', 'failed', 'cancelled', 'skipped')
RETURNING id, status, workspace_id, autopilot_id, trigger_id, source, reason_code, reason, created_at, finished_at;

-- name: run_claim_undispatched
-- Lock one run the worker must dispatch: admitted 'pending' without a delivery (manual, api, schedule), oldest
-- first (autopilot_run_undispatched_idx: pending webhook runs are the delivery path's and never read here).
-- SKIP LOCKED: each run goes to one dispatcher. A buffered run (overlap policy buffer_one) is left alone while
-- an older run of its trigger is unfinished: never two active.
SELECT id FROM autopilot_run r
WHERE status = 'pending' AND webhook_delivery_id IS NULL
  AND NOT (reason_code IS NOT DISTINCT FROM 'buffered' AND EXISTS (
      SELECT 1 FROM autopilot_run o
      WHERE o.trigger_id = r.trigger_id AND o.status IN ('pending', 'issue_created', 'queued', 'running')
        AND (o.created_at, o.id) < (r.created_at, r.id)))
ORDER BY updated_at
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: run_claim_stale
-- Lock one run left half-made for more than $1 seconds ($2 = clock override, nullable): a webhook run still
-- 'pending' whose delivery is no longer queued (a crash between the two writes), or an issue without its task.
-- A webhook run whose delivery is still queued is not half-made: the delivery path owns it (its pacing, backoff
-- and fair order), however long it waits; dispatching it here pushed paced deliveries' runs past their
-- trigger's rate limit once they had waited the repair delay. Both branches are bounded by age on their
-- indexes (autopilot_run_pending_idx, autopilot_run_half_made_idx). No buffered run is among them: those are
-- schedule runs (no delivery), and a run's issue ends its wait (run_set_issue).
SELECT id FROM autopilot_run r
WHERE (status = 'pending' AND webhook_delivery_id IS NOT NULL
       AND updated_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1)
       AND NOT EXISTS (SELECT 1 FROM webhook_delivery d WHERE d.id = r.webhook_delivery_id AND d.status = 'queued'))
   OR (status = 'issue_created' AND task_id IS NULL
       AND updated_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1))
ORDER BY updated_at
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: run_touch
-- Move run $1 to the back of the repair order after a failed dispatch attempt (so one broken run cannot
-- hold up the others).
UPDATE autopilot_run SET updated_at = now() WHERE id = $1;
-- name: run_skip_overlap
-- Overlap policy: the just-admitted pending run $1 becomes 'skipped' (previous_run_active) with
-- reason $2, in the admitting transaction, before anyone is told about it.
UPDATE autopilot_run
SET status = 'skipped', reason_code = 'previous_run_active', reason = $2, finished_at = now(), updated_at = now()
WHERE id = $1 AND status = 'pending'
RETURNING id, status, reason_code;

-- name: run_buffer
-- Overlap policy buffer_one: the just-admitted pending run $1 waits (reason_code 'buffered', reason $2) for
-- the active run of its trigger to end; the run worker dispatches it once no older run of the trigger is
-- unfinished (run_claim_undispatched), woken by hookgate_run_wake_buffered when that run ends.
UPDATE autopilot_run
SET reason_code = 'buffered', reason = $2, updated_at = now()
WHERE id = $1 AND status = 'pending'
RETURNING id, status, reason_code;

-- name: run_notify_pending
-- Wake workers for the pending runs $1 (channel hookgate_runs, payload = run id), in the caller's transaction.
SELECT pg_notify('hookgate_runs', r::text) FROM unnest($1::uuid[]) AS r;

-- name: run_failure_rates
-- Active autopilots whose finished runs created after $1 - $2 seconds (and after the autopilot was last
-- resumed: a resume restarts the window) number at least $3 with at least a share $4 failed (the auto-pause
-- rule, ARCHITECTURE §6).
SELECT r.autopilot_id, count(*) AS finished, count(*) FILTER (WHERE r.status = 'failed') AS failed
FROM autopilot_run r
JOIN autopilot a ON a.id = r.autopilot_id AND a.status = 'active'
WHERE r.created_at > $1::timestamptz - make_interval(secs => $2)
  AND (a.failure_window_since IS NULL OR r.created_at > a.failure_window_since)
  AND r.status IN ('completed', 'failed', 'cancelled')
GROUP BY r.autopilot_id
HAVING count(*) >= $3::bigint AND count(*) FILTER (WHERE r.status = 'failed') >= $4::float8 * count(*);

-- name: run_list
-- Runs of workspace $1, newest first. Filters (each nullable): $2 = autopilot, $3 = status, $4 = source,
-- $5 = cursor (the last id seen). $6 = at most. A pending run's delivery status, reason code and
-- available_at come along (a run held back by its trigger's pacing says so; see gateway/admin/runs.py), and
-- its task's attempt, last error and when a waiting task is tried next, which of the run's tasks it is
-- (run_attempt: 1 for the first dispatch, n + 1 after n retries) and, while it waits for an unhealthy agent,
-- that agent's next probe (not before now).
SELECT r.*, d.status AS delivery_status, d.reason_code AS delivery_reason_code,
       d.available_at AS delivery_available_at,
       t.status AS task_status, t.attempt AS task_attempt, t.error AS task_error, t.available_at AS task_available_at,
       CASE WHEN r.task_id IS NOT NULL THEN (SELECT count(*) FROM agent_task c WHERE c.run_id = r.id) END AS run_attempt,
       (SELECT greatest(h.next_probe_at, now()) FROM agent_health h
        WHERE h.agent_id = t.agent_id AND h.state = 'unhealthy' AND t.status = 'queued') AS agent_next_probe_at
FROM autopilot_run r
LEFT JOIN webhook_delivery d ON d.id = r.webhook_delivery_id AND r.status = 'pending'
LEFT JOIN agent_task t ON t.id = r.task_id
WHERE r.workspace_id = $1 AND ($2::uuid IS NULL OR r.autopilot_id = $2) AND ($3::text IS NULL OR r.status = $3)
  AND ($4::text IS NULL OR r.source = $4) AND ($5::uuid IS NULL OR r.id < $5)
ORDER BY r.id DESC
LIMIT $6;

-- name: run_chain
-- Run $2 of workspace $1 with what it came from and what it made: delivery, issue and task statuses, and the
-- task's place among the run's tasks and its agent's next probe as in run_list.
SELECT r.*,
       d.status AS delivery_status, d.reason_code AS delivery_reason_code,
       d.signature_status AS delivery_signature_status, d.available_at AS delivery_available_at,
       i.status AS issue_status,
       t.status AS task_status, t.attempt AS task_attempt, t.error AS task_error, t.available_at AS task_available_at,
       CASE WHEN r.task_id IS NOT NULL THEN (SELECT count(*) FROM agent_task c WHERE c.run_id = r.id) END AS run_attempt,
       (SELECT greatest(h.next_probe_at, now()) FROM agent_health h
        WHERE h.agent_id = t.agent_id AND h.state = 'unhealthy' AND t.status = 'queued') AS agent_next_probe_at
FROM autopilot_run r
LEFT JOIN webhook_delivery d ON d.id = r.webhook_delivery_id
LEFT JOIN issue i ON i.id = r.issue_id
LEFT JOIN agent_task t ON t.id = r.task_id
WHERE r.workspace_id = $1 AND r.id = $2;

-- name: run_cancel
-- Cancel run $2 of workspace $1 unless it already ended. $3 = reason. Returns the run if it changed.
UPDATE autopilot_run
SET status = 'cancelled', reason_code = 'cancelled_by_member', reason = $3, finished_at = now(),
    updated_at = now()
WHERE workspace_id = $1 AND id = $2 AND status IN ('pending', 'issue_created', 'queued', 'running')
RETURNING *;

-- name: run_requeue
-- A retry gave run $1 its new task $2: the run is queued again, its ending (finish time, reason) cleared, and
-- its deadline counts from now (retried_at).
UPDATE autopilot_run
SET status = 'queued', task_id = $2, reason_code = NULL, reason = NULL, finished_at = NULL, retried_at = now(),
    updated_at = now()
WHERE id = $1
RETURNING id, status;

-- name: run_fail_overdue
-- The deadline sweep: lock up to $1 unfinished runs whose autopilot's run_timeout_s has passed since the run
-- was created or last retried, and end them failed (deadline_exceeded). $2 = clock override (nullable).
-- SKIP LOCKED: concurrent sweeps take different runs, and a run being retried or cancelled right now is left
-- for the next sweep; the lock re-checks the status, so a run that just ended keeps its ending.
WITH due AS (
    SELECT r.id, a.run_timeout_s FROM autopilot a
    JOIN autopilot_run r ON r.autopilot_id = a.id
    WHERE a.run_timeout_s IS NOT NULL
      AND r.status IN ('pending', 'issue_created', 'queued', 'running')
      AND coalesce(r.retried_at, r.created_at)
          < coalesce($2::timestamptz, now()) - make_interval(secs => a.run_timeout_s)
    ORDER BY coalesce(r.retried_at, r.created_at)
    LIMIT $1
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE autopilot_run r
SET status = 'failed', reason_code = 'deadline_exceeded',
    reason = format('the run did not finish within %s s (the autopilot''s run_timeout_s)', due.run_timeout_s),
    finished_at = now(), updated_at = now()
FROM due
WHERE r.id = due.id
RETURNING r.id, r.workspace_id, r.autopilot_id;

-- name: workspaces_queue_full
-- The workspaces with at least $1 waiting runs (pending, issue_created or queued: not yet running, not
-- finished), for ingress's HOOKGATE_WORKSPACE_MAX_QUEUED. A loose index scan of autopilot_run_waiting_idx: one
-- probe per workspace with waiting runs, then at most $1 index entries each (is there a $1-th one?), so the cost
-- does not grow with a backlog past the limit.
WITH RECURSIVE spaces AS (
    (SELECT r.workspace_id FROM autopilot_run r WHERE r.status IN ('pending', 'issue_created', 'queued')
     ORDER BY r.workspace_id LIMIT 1)
    UNION ALL
    SELECT (SELECT r.workspace_id FROM autopilot_run r
            WHERE r.status IN ('pending', 'issue_created', 'queued') AND r.workspace_id > s.workspace_id
            ORDER BY r.workspace_id LIMIT 1)
    FROM spaces s WHERE s.workspace_id IS NOT NULL
)
SELECT s.workspace_id FROM spaces s
WHERE s.workspace_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM autopilot_run r
              WHERE r.workspace_id = s.workspace_id AND r.status IN ('pending', 'issue_created', 'queued')
              OFFSET $1::integer - 1 LIMIT 1);
