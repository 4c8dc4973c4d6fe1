-- name: task_insert_for_run
-- The task of one run attempt, deduplicated by its idempotency key ('run:<run id>:<attempt>').
-- $1 workspace, $2 run, $3 issue (nullable), $4 agent, $5 payload, $6 max attempts (of the default retry
-- schedule; an agent with its own schedule gets one more than its delays), $7 idempotency key.
-- Returns nothing if that task already exists. The task records its run's autopilot (the claim's fair share).
INSERT INTO agent_task (workspace_id, run_id, issue_id, agent_id, payload, max_attempts, idempotency_key,
                        autopilot_id)
SELECT $1, $2, $3, $4, $5, coalesce(cardinality(ag.retry_schedule) + 1, $6), $7,
       (SELECT r.autopilot_id FROM autopilot_run r WHERE r.id = $2)
FROM agent ag WHERE ag.id = $4
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;

-- name: task_get_by_key
-- The task with idempotency key $1.
SELECT id FROM agent_task WHERE idempotency_key = $1;

-- name: task_claim
-- Claim (P1) up to $3 due queued tasks of agent $1 (or only task $2 when set) within the agent's concurrency
-- cap (P3), leasing each for $4 seconds to holder $5; the run moves to running and each claim is audited
-- (actor type $6). $7 = clock override (nullable). $8 = the bound of every agent's cap
-- (HOOKGATE_AGENT_MAX_CONCURRENCY; NULL = none). Returns the claimed tasks with their lease tokens and what
-- a holder needs to do them (the autopilot; for http agents where and how to push, with the previous signing
-- secret while a rotation's window lasts), saving a round trip.
WITH claimed AS (
    SELECT * FROM hookgate_task_claim($1, $2, $3, $4, $5, coalesce($7::timestamptz, now()), $8)
), started AS (
    UPDATE autopilot_run r SET status = 'running', updated_at = now()
    FROM claimed c
    WHERE r.id = c.run_id AND r.status IN ('pending', 'issue_created', 'queued')
    RETURNING r.id
), audited AS (
    INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
    SELECT c.workspace_id, 'CLAIM', $6, $5, 'agent_task', c.id::text,
           jsonb_build_object('attempt', c.attempt, 'lease_expires_at', c.lease_expires_at, 'run_id', c.run_id)
    FROM claimed c
)
SELECT c.id, c.workspace_id, c.run_id, c.agent_id, c.payload, c.attempt, c.max_attempts, c.lease_token,
       c.lease_expires_at, ag.endpoint_url, ag.timeout_s, ag.signing_secret_ct,
       CASE WHEN ag.previous_secret_expires_at > now() THEN ag.previous_secret_ct END AS previous_secret_ct,
       ap.id AS autopilot_id, ap.title AS autopilot_title, ap.instructions AS autopilot_instructions
FROM claimed c
JOIN agent ag ON ag.id = c.agent_id
LEFT JOIN autopilot_run r ON r.id = c.run_id
LEFT JOIN autopilot ap ON ap.id = r.autopilot_id;

-- name: task_agents_due
-- HTTP agents that have due queued tasks, with their push timeout, their concurrency cap and how many of its slots
-- are free (the push worker claims for those with free slots; the others' tasks wait for a slot, so a finished push
-- should look again; a negative count: more tasks run than a lowered cap allows).
-- $1 = at most this many agents, $2 = clock override (nullable), $3 = the concurrency bound of every agent
-- (HOOKGATE_AGENT_MAX_CONCURRENCY). Agents with a free slot come first, then the least recently served (by any
-- worker: the newest served_at of its slots); an unhealthy agent only once its next probe is due. With each
-- agent its workspace (the push worker's fair shares are per workspace first).
SELECT a.id, a.workspace_id, a.timeout_s, c.cap, c.free, c.free > 0 AS has_free,
       (SELECT max(sl.served_at) FROM agent_slot sl WHERE sl.agent_id = a.id) AS served_at
FROM agent a
CROSS JOIN LATERAL (
    SELECT least(a.max_concurrency, $3) AS cap,
           least(a.max_concurrency, $3)
               - (SELECT count(*) FROM agent_task r WHERE r.agent_id = a.id AND r.status = 'running')::integer AS free
) c
WHERE a.runtime_kind = 'http' AND a.archived_at IS NULL
  AND EXISTS (SELECT 1 FROM agent_task t WHERE t.agent_id = a.id AND t.status = 'queued'
                AND t.available_at <= coalesce($2::timestamptz, now()))
  AND NOT EXISTS (SELECT 1 FROM agent_health h WHERE h.agent_id = a.id AND h.state = 'unhealthy'
                    AND h.next_probe_at > now())
ORDER BY has_free DESC, served_at NULLS FIRST
LIMIT $1;

-- name: task_state
-- The lease facts of task $1 (to tell a repeated report from a late one) and its agent's runtime kind.
SELECT t.id, t.workspace_id, t.agent_id, t.run_id, t.status, t.lease_token, t.released_token, t.attempt,
       ag.runtime_kind, ag.retry_schedule
FROM agent_task t JOIN agent ag ON ag.id = t.agent_id
WHERE t.id = $1;

-- name: task_renew
-- The holder extends its lease (P4): $1 task, $2 lease token, $3 seconds from now; audited as RENEW by
-- actor type $4 / id $5. Zero rows: the lease is lost.
WITH renewed AS (
    UPDATE agent_task SET lease_expires_at = now() + make_interval(secs => $3), updated_at = now()
    WHERE id = $1 AND lease_token = $2 AND status = 'running'
    RETURNING id, workspace_id, attempt, lease_expires_at
), audited AS (
    INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
    SELECT workspace_id, 'RENEW', $4, $5, 'agent_task', id::text,
           jsonb_build_object('attempt', attempt, 'lease_expires_at', lease_expires_at)
    FROM renewed
)
SELECT lease_expires_at FROM renewed;

-- name: task_finish
-- The holder's final report (P5): task $1 with lease token $2 ends as $3 (succeeded|failed|cancelled)
-- with result $4, error $5, retry class $6; audited as RELEASE by actor type $7 / id $8. A pull runtime's
-- report (actor type other than 'worker', whose pushes record their own) is kept as an attempt row. Zero
-- rows: the token is not the current lease (a repeat or a late result; the caller tells which).
WITH done AS (
    UPDATE agent_task
    SET status = $3, result = $4, error = $5, retry_class = $6, released_token = lease_token,
        lease_token = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now()
    WHERE id = $1 AND lease_token = $2 AND status = 'running'
    RETURNING id, workspace_id, run_id, issue_id, agent_id, status, attempt, error, attempt_started_at
), attempted AS (
    INSERT INTO task_attempt (workspace_id, task_id, run_id, agent_id, attempt, started_at, finished_at,
                              duration_ms, outcome, error)
    SELECT workspace_id, id, run_id, agent_id, attempt, coalesce(attempt_started_at, now()), now(),
           greatest(0, extract(epoch FROM now() - coalesce(attempt_started_at, now())) * 1000)::integer,
           status, error
    FROM done WHERE $7 <> 'worker'
), audited AS (
    INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
    SELECT workspace_id, 'RELEASE', $7, $8, 'agent_task', id::text,
           jsonb_build_object('status', status, 'attempt', attempt)
    FROM done
)
SELECT id, workspace_id, run_id, issue_id, status, attempt, error FROM done;

-- name: task_retry
-- The holder gives the task back for another attempt after $3 seconds (retryable failure): task $1,
-- lease token $2, error $4, retry class $5; audited as RELEASE by actor type $6 / id $7. $8 = give the attempt
-- back (its agent is unhealthy: tasks wait for it without spending attempts). The run waits 'queued' again.
-- A pull runtime's report (actor type other than 'worker', whose pushes record their own) is kept as an
-- attempt row. Zero rows when the lease is lost or no attempt is left (the caller then finishes it as failed).
WITH back AS (
    UPDATE agent_task
    SET status = 'queued', error = $4, retry_class = $5, released_token = lease_token, lease_token = NULL,
        lease_expires_at = NULL, holder_instance = NULL, available_at = now() + make_interval(secs => $3),
        attempt = attempt - CASE WHEN $8 THEN 1 ELSE 0 END, updated_at = now()
    WHERE id = $1 AND lease_token = $2 AND status = 'running' AND ($8 OR attempt < max_attempts)
    RETURNING id, workspace_id, run_id, agent_id, status, attempt, available_at, attempt_started_at
), waiting AS (
    UPDATE autopilot_run r SET status = 'queued', updated_at = now()
    FROM back WHERE r.id = back.run_id AND r.status = 'running'
), attempted AS (
    INSERT INTO task_attempt (workspace_id, task_id, run_id, agent_id, attempt, started_at, finished_at,
                              duration_ms, outcome, error)
    SELECT workspace_id, id, run_id, agent_id, attempt + CASE WHEN $8 THEN 1 ELSE 0 END,
           coalesce(attempt_started_at, now()), now(),
           greatest(0, extract(epoch FROM now() - coalesce(attempt_started_at, now())) * 1000)::integer,
           'failed', $4
    FROM back WHERE $6 <> 'worker'
), audited AS (
    INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
    SELECT workspace_id, 'RELEASE', $6, $7, 'agent_task', id::text,
           jsonb_build_object('status', 'queued', 'attempt', attempt, 'retry_at', available_at, 'error', $4::text)
    FROM back
)
SELECT id, workspace_id, run_id, status, attempt, available_at FROM back;

-- name: task_release
-- Hand task $1 (lease token $2) back untouched: queued, due now; audited as RELEASE by actor type $3 / id $4
-- with reason $5. $6 = give the attempt back: true when nobody ever received the lease (a runtime hung up
-- before its claim could be answered: 'client_gone'), false when a push may have started (a stopping
-- worker: 'shutdown'). Zero rows: that lease is gone already.
WITH back AS (
    UPDATE agent_task
    SET status = 'queued', attempt = attempt - CASE WHEN $6 THEN 1 ELSE 0 END, lease_token = NULL,
        lease_expires_at = NULL, holder_instance = NULL, available_at = now(), updated_at = now()
    WHERE id = $1 AND lease_token = $2 AND status = 'running'
    RETURNING id, workspace_id, attempt
), audited AS (
    INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
    SELECT workspace_id, 'RELEASE', $3, $4, 'agent_task', id::text,
           jsonb_build_object('status', 'queued', 'attempt', attempt, 'reason', $5::text)
    FROM back
)
SELECT id FROM back;

-- name: task_expire
-- Watchdog: running tasks whose lease ended before $1 (clock override, nullable = now()), or whose holder
-- instance went offline ($2 agents / $3 instance names, parallel arrays), go back to queued (or fail,
-- lease_expired, when no attempt is left), each with an EXPIRE audit entry and a 'lease_lost' attempt row. The
-- next holder sees attempt.
-- Each row names its agent, so the watchdog can wake the runtimes waiting for each one.
WITH due AS (
    SELECT id, holder_instance FROM agent_task
    WHERE status = 'running'
      AND (lease_expires_at < coalesce($1::timestamptz, now())
           OR (holder_instance IS NOT NULL
               AND (agent_id, holder_instance) IN (SELECT * FROM unnest($2::uuid[], $3::text[]))))
    FOR UPDATE SKIP LOCKED
), expired AS (
    UPDATE agent_task t
    SET status = CASE WHEN t.attempt >= t.max_attempts THEN 'failed' ELSE 'queued' END,
        error = 'lease expired', retry_class = 'lease_expired',
        finished_at = CASE WHEN t.attempt >= t.max_attempts THEN now() END,
        lease_token = NULL, lease_expires_at = NULL, holder_instance = NULL, available_at = now(),
        updated_at = now()
    FROM due WHERE t.id = due.id
    RETURNING t.id, t.workspace_id, t.run_id, t.agent_id, t.status, t.attempt, due.holder_instance,
              t.attempt_started_at
), attempted AS (
    INSERT INTO task_attempt (workspace_id, task_id, run_id, agent_id, attempt, started_at, finished_at,
                              duration_ms, outcome, error)
    SELECT workspace_id, id, run_id, agent_id, attempt, coalesce(attempt_started_at, now()), now(),
           greatest(0, extract(epoch FROM now() - coalesce(attempt_started_at, now())) * 1000)::integer,
           'lease_lost', 'lease expired'
    FROM expired
), audited AS (
    INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
    SELECT workspace_id, 'EXPIRE', 'system', 'watchdog', 'agent_task', id::text,
           jsonb_build_object('attempt', attempt, 'status', status, 'holder', holder_instance)
    FROM expired
)
SELECT id, workspace_id, run_id, agent_id, status, attempt FROM expired;

-- name: task_cancel_for_run
-- Cancel run $1's unfinished tasks (the run was cancelled, its issue closed, or its deadline passed). A running
-- task's lease ends here: its token moves to released_token, so the holder's next renew or report is told
-- "cancelled" (409) rather than "lease lost", and its concurrency slot is free at once. Returns each task
-- with the status it had ('queued' or 'running': a running one has a holder to stop) and its agent. A pull
-- runtime's lease ended this way is kept as a 'cancelled' attempt (a push records its own when it aborts).
WITH doomed AS (
    SELECT id, status FROM agent_task WHERE run_id = $1 AND status IN ('queued', 'running')
    ORDER BY id
    FOR UPDATE
), cancelled AS (
    UPDATE agent_task t
    SET status = 'cancelled',
        released_token = CASE WHEN doomed.status = 'running' THEN t.lease_token ELSE t.released_token END,
        lease_token = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now()
    FROM doomed
    WHERE t.id = doomed.id
    RETURNING t.id, t.workspace_id, t.run_id, t.agent_id, t.attempt, t.attempt_started_at, doomed.status AS was
), attempted AS (
    INSERT INTO task_attempt (workspace_id, task_id, run_id, agent_id, attempt, started_at, finished_at,
                              duration_ms, outcome, error)
    SELECT c.workspace_id, c.id, c.run_id, c.agent_id, c.attempt, coalesce(c.attempt_started_at, now()), now(),
           greatest(0, extract(epoch FROM now() - coalesce(c.attempt_started_at, now())) * 1000)::integer,
           'cancelled', 'the run was cancelled'
    FROM cancelled c JOIN agent ag ON ag.id = c.agent_id
    WHERE c.was = 'running' AND ag.runtime_kind <> 'http'
)
SELECT id, agent_id, was FROM cancelled;

-- name: task_list
-- Tasks of workspace $1, newest first, each with its run's autopilot (who may read its result depends on it).
-- Filters (nullable): $2 = agent, $3 = status, $4 = run, $5 = cursor (last id seen). $6 = at most. Lease
-- tokens are never listed. A queued task of an unhealthy agent waits for that agent's next probe (not before
-- now): agent_next_probe_at.
SELECT t.id, t.workspace_id, t.run_id, t.issue_id, t.agent_id, t.payload, t.status, t.attempt, t.max_attempts,
       t.lease_expires_at, t.holder_instance, t.available_at, t.result, t.error, t.retry_class, t.created_at,
       t.updated_at, t.started_at, t.finished_at,
       CASE WHEN t.status = 'queued' AND t.attempt > 0 THEN t.available_at END AS next_attempt_at, t.error AS last_error,
       r.autopilot_id,
       (SELECT greatest(h.next_probe_at, now()) FROM agent_health h
        WHERE h.agent_id = t.agent_id AND h.state = 'unhealthy' AND t.status = 'queued') AS agent_next_probe_at
FROM agent_task t LEFT JOIN autopilot_run r ON r.id = t.run_id
WHERE t.workspace_id = $1 AND ($2::uuid IS NULL OR t.agent_id = $2) AND ($3::text IS NULL OR t.status = $3)
  AND ($4::uuid IS NULL OR t.run_id = $4) AND ($5::uuid IS NULL OR t.id < $5)
ORDER BY t.id DESC
LIMIT $6;

-- name: task_get
-- One task of workspace $1 by id $2 (without its lease token), with its run's autopilot and, while it waits for
-- an unhealthy agent, that agent's next probe as in task_list.
SELECT t.id, t.workspace_id, t.run_id, t.issue_id, t.agent_id, t.payload, t.status, t.attempt, t.max_attempts,
       t.lease_expires_at, t.holder_instance, t.available_at, t.result, t.error, t.retry_class, t.created_at,
       t.updated_at, t.started_at, t.finished_at,
       CASE WHEN t.status = 'queued' AND t.attempt > 0 THEN t.available_at END AS next_attempt_at, t.error AS last_error,
       r.autopilot_id,
       (SELECT greatest(h.next_probe_at, now()) FROM agent_health h
        WHERE h.agent_id = t.agent_id AND h.state = 'unhealthy' AND t.status = 'queued') AS agent_next_probe_at
FROM agent_task t LEFT JOIN autopilot_run r ON r.id = t.run_id
WHERE t.workspace_id = $1 AND t.id = $2;

-- name: task_count_for_run
-- How many tasks run $1 has had (every attempt of the run: the first dispatch and each retry).
SELECT count(*) FROM agent_task WHERE run_id = $1;

-- name: task_succeed_many
-- Push outcomes in one statement: the holders' reports (P5) that tasks $1 (lease tokens $2, results $3,
-- parallel arrays) succeeded. Each task is guarded by its lease token and audited as RELEASE by actor type
-- 'worker' / id $4; its run ends completed from that fact (a run keeps its first ending). Returns the tasks
-- applied; a missing one is a repeat or a late result (the caller reports it alone to tell which).
-- `t.status || ''`: the tasks are reached by key. Written plainly, the test matched the partial indexes of
-- running tasks, and a connection's cached generic plan (made while few tasks ran) hash-joined the reports with
-- every entry of agent_task_running_agent_idx, which keeps the entries of tasks that ran until a vacuum removes
-- them: 260 heap pages and ~0.9 ms for one report at 200 webhooks/s (docs/BENCHMARKS.md, "The push's outcome by key").
WITH done AS (
    UPDATE agent_task t
    SET status = 'succeeded', result = x.result, error = NULL, retry_class = NULL, released_token = t.lease_token,
        lease_token = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now()
    FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[]) AS x(id, token, result)
    WHERE t.id = x.id AND t.lease_token = x.token AND t.status || '' = 'running'
    RETURNING t.id, t.workspace_id, t.run_id, t.status, t.attempt
), audited AS (
    INSERT INTO audit_log (workspace_id, action, actor_type, actor_id, subject_type, subject_id, detail)
    SELECT workspace_id, 'RELEASE', 'worker', $4, 'agent_task', id::text,
           jsonb_build_object('status', status, 'attempt', attempt)
    FROM done
), ended AS (
    UPDATE autopilot_run r SET status = 'completed', finished_at = now(), updated_at = now()
    FROM done
    WHERE r.id = done.run_id AND r.status NOT IN ('completed', 'failed', 'cancelled', 'skipped')
)
SELECT id FROM done;

-- name: task_agents_among
-- Which of agents $2 own any of tasks $1 (routing a burst of hookgate_tasks notifications, whose payload is a
-- task id, to the runtimes waiting for those agents).
SELECT DISTINCT agent_id FROM agent_task WHERE id = ANY($1::uuid[]) AND agent_id = ANY($2::uuid[]);

