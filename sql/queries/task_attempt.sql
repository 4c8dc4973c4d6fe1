-- name: push_outcomes_record
-- One flush of push outcomes, in one statement: every attempt as a row, and the agents' health.
-- Attempts ($1-$10, parallel arrays): tasks, attempt numbers, started, finished, durations (ms), outcomes, HTTP
-- statuses, errors, response headers (the kept subset), response body excerpts; $18-$20, parallel to them: each
-- task's workspace, run and agent (the pusher has them from the claim). Health ($11-$14, per agent): agents,
-- consecutive failures to count (those after the flush's last success), whether a success came first (the count
-- starts again from it), the last error; $15 failures that trip the breaker, $16 first probe interval, $17 longest
-- probe interval (seconds).
-- An agent gets a health row with its first failure; a success resets it and recovers an unhealthy agent; after
-- $15 consecutive failures it is 'unhealthy': no slot but one probe per interval (hookgate_slots_take). Returns
-- each agent of the flush: its state ('healthy' when it has no row), whether that changed in this
-- transaction, its health row's other fields (NULL when it has none), its own retry schedule (NULL = the
-- default), workspace and name. An agent without failures and without a row costs index probes only.
WITH attempted AS (
    INSERT INTO task_attempt (workspace_id, task_id, run_id, agent_id, attempt, started_at, finished_at,
                              duration_ms, outcome, http_status, error, response_headers, response_body)
    -- Not joined to agent_task for those: this statement's generic plan, made while the table was small, hashed
    -- a sequential scan of the whole of it on every flush (seen with auto_explain in bench/dispatch.py).
    SELECT a.workspace_id, a.task_id, a.run_id, a.agent_id, a.attempt, a.started_at, a.finished_at, a.duration_ms,
           a.outcome, a.http_status, a.error, a.headers, a.body
    FROM unnest($1::uuid[], $2::integer[], $3::timestamptz[], $4::timestamptz[], $5::integer[], $6::text[],
                $7::integer[], $8::text[], $9::jsonb[], $10::text[], $18::uuid[], $19::uuid[], $20::uuid[])
         AS a(task_id, attempt, started_at, finished_at, duration_ms, outcome, http_status, error, headers, body,
              workspace_id, run_id, agent_id)
), x AS (
    SELECT * FROM unnest($11::uuid[], $12::integer[], $13::boolean[], $14::text[]) AS x(agent_id, failed, reset, error)
), added AS (
    -- An agent failing for the first time but not tripped has been healthy since it was made.
    INSERT INTO agent_health (agent_id, state, since, failures, last_error, last_failure_at, next_probe_at,
                              probe_interval_s, probe_max_s)
    SELECT x.agent_id, CASE WHEN x.failed >= $15::integer THEN 'unhealthy' ELSE 'healthy' END,
           CASE WHEN x.failed >= $15::integer THEN now() ELSE ag.created_at END, x.failed, x.error, now(),
           CASE WHEN x.failed >= $15::integer THEN now() + make_interval(secs => $16::double precision) END,
           CASE WHEN x.failed >= $15::integer THEN $16::double precision END, CASE WHEN x.failed >= $15::integer THEN $17::double precision END
    FROM x JOIN agent ag ON ag.id = x.agent_id WHERE x.failed > 0
    ON CONFLICT (agent_id) DO NOTHING
    RETURNING agent_id, state, state = 'unhealthy' AS changed, since, failures, last_error, next_probe_at
), changed AS (
    -- Rows inserted above are not visible here (one snapshot), so each agent is written once. "Sick" (unhealthy
    -- after this flush: tripped now, or still, no success having come in between) is written out in each SET
    -- so that it reads the row as locked (a concurrent flush's update is seen), not as the snapshot saw it:
    --   CASE WHEN x.reset THEN x.failed >= $15::integer ELSE h.state = 'unhealthy' OR h.failures + x.failed >= $15::integer END
    UPDATE agent_health h
    SET failures = CASE WHEN x.reset THEN x.failed ELSE h.failures + x.failed END,
        last_error = coalesce(x.error, h.last_error),
        last_failure_at = CASE WHEN x.failed > 0 THEN now() ELSE h.last_failure_at END,
        state = CASE WHEN (CASE WHEN x.reset THEN x.failed >= $15::integer
                                ELSE h.state = 'unhealthy' OR h.failures + x.failed >= $15::integer END)
                     THEN 'unhealthy' ELSE 'healthy' END,
        since = CASE WHEN (CASE WHEN x.reset THEN x.failed >= $15::integer
                                ELSE h.state = 'unhealthy' OR h.failures + x.failed >= $15::integer END) <> (h.state = 'unhealthy')
                     THEN now() ELSE h.since END,
        next_probe_at = CASE WHEN NOT (CASE WHEN x.reset THEN x.failed >= $15::integer
                                            ELSE h.state = 'unhealthy' OR h.failures + x.failed >= $15::integer END) THEN NULL
                             WHEN h.state = 'unhealthy' THEN h.next_probe_at
                             ELSE now() + make_interval(secs => $16::double precision) END,
        probe_interval_s = CASE WHEN NOT (CASE WHEN x.reset THEN x.failed >= $15::integer
                                               ELSE h.state = 'unhealthy' OR h.failures + x.failed >= $15::integer END) THEN NULL
                                WHEN h.state = 'unhealthy' THEN h.probe_interval_s ELSE $16::double precision END,
        probe_max_s = $17::double precision, updated_at = now()
    FROM (SELECT x.* FROM x JOIN agent_health l ON l.agent_id = x.agent_id
          ORDER BY x.agent_id FOR UPDATE OF l) x  -- rows locked in agent order: concurrent flushes never deadlock
    WHERE h.agent_id = x.agent_id AND (x.failed > 0 OR h.failures > 0 OR h.state = 'unhealthy')
    RETURNING h.agent_id, h.state, h.since = now() AS changed, h.since, h.failures, h.last_error, h.next_probe_at
)
SELECT x.agent_id, coalesce(c.state, 'healthy') AS state, coalesce(c.changed, false) AS changed, c.since,
       c.failures, c.last_error, c.next_probe_at, ag.retry_schedule, ag.workspace_id, ag.name
FROM x
LEFT JOIN (SELECT * FROM added UNION ALL SELECT * FROM changed) c ON c.agent_id = x.agent_id
JOIN agent ag ON ag.id = x.agent_id;

-- name: attempt_list
-- Attempts of task $2 of workspace $1, oldest first, after cursor $3 (the last id seen, nullable); at most $4.
SELECT a.id, a.task_id, a.run_id, a.agent_id, a.attempt, a.started_at, a.finished_at, a.duration_ms, a.outcome,
       a.http_status, a.error, a.response_headers, a.response_body
FROM task_attempt a
WHERE a.workspace_id = $1 AND a.task_id = $2 AND ($3::uuid IS NULL OR a.id > $3)
ORDER BY a.id
LIMIT $4;

-- name: attempt_latest
-- The latest attempt of task $1, if any.
SELECT a.id, a.task_id, a.run_id, a.agent_id, a.attempt, a.started_at, a.finished_at, a.duration_ms, a.outcome,
       a.http_status, a.error, a.response_headers, a.response_body
FROM task_attempt a WHERE a.task_id = $1
ORDER BY a.id DESC LIMIT 1;
