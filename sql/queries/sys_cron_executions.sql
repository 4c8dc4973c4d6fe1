-- name: cron_clock
-- The database clock: every scheduling decision uses it, never the host's clock (ARCHITECTURE §3).
SELECT clock_timestamp() AS now;

-- name: cron_plan_afresh
-- For the rest of the transaction (or until cron_plan_default), plan each statement for the tables as they are
-- now (a custom plan per call). A connection's cached generic plan is made from the statistics of its sixth
-- call, in a young database while sys_cron_executions was small (analyzed empty, no autovacuum since), and it
-- kept scanning the table whole as a herd filled it: the tick's sweeps, takeovers and next-wake read (20,000
-- rows read for none found; they run in such a transaction, scheduler.claims.planned_afresh), and the
-- planner's read (trigger_due_schedules: two probes per due trigger, a herd's second minute p99 9.4 s against
-- 0.46 s for the first in bench/scheduler.py). A custom plan sizes the table from its pages now and reads the
-- partial indexes instead.
SET LOCAL plan_cache_mode = force_custom_plan;

-- name: cron_plan_default
-- Back to the session's plan_cache_mode (after cron_plan_afresh) for the rest of the transaction: the planner's
-- read is followed by the run inserts, whose foreign-key checks would otherwise be planned again for every row.
SET LOCAL plan_cache_mode TO DEFAULT;

-- name: cron_sweep_stale
-- Mark RUNNING rows of job $1 whose holder stopped heartbeating (stale_after < $2 = now) FAILED
-- 'stale_timeout'. With stale re-entry ($3) and attempts left they are due for a retry at once.
-- Rows locked by a live holder's transaction are skipped, so a sweep never waits on a runner. The candidates
-- are found first (a materialized CTE, by the partial stale index), then updated by key: whatever the plan,
-- the work follows the candidates (normally none), never the rows of the table. Written as "UPDATE … WHERE
-- id IN (SELECT … FOR UPDATE SKIP LOCKED)", a sweep ran for minutes in nested scans under a herd of 100,000
-- occurrences a minute.
WITH stale AS MATERIALIZED (
    SELECT c.id FROM sys_cron_executions c
    WHERE c.job_name = $1 AND c.status = 'RUNNING' AND c.stale_after < $2
    FOR UPDATE SKIP LOCKED
)
UPDATE sys_cron_executions e
SET status = 'FAILED', error_code = 'stale_timeout',
    error_message = 'the runner stopped heartbeating before stale_after',
    finished_at = $2, duration_ms = greatest(0, (extract(epoch FROM $2::timestamptz - e.started_at) * 1000)::integer),
    next_retry_at = CASE WHEN $3 AND e.attempt < e.max_attempts THEN $2 END
FROM stale
WHERE e.id = stale.id
RETURNING e.id, e.scope_id, e.plan_time, e.attempt;

-- name: cron_sweep_gone
-- Mark RUNNING rows of jobs $1 FAILED 'runner_gone' when their runner's liveness lock is not held: its
-- process died and PostgreSQL ended its session (or the row predates liveness locks: runner_lock NULL).
-- $2[i] = whether job $1[i] allows stale re-entry (then, with attempts left, the retry is due at once, as
-- the same plan), $3 = now, $4 = the liveness lock space (the first key of the two-int advisory locks;
-- objsubid 2 keeps them apart from one-bigint locks such as the migration lock's).
-- Only this database's locks count: advisory locks are per database. The lock table is read once, at
-- the start of the statement, and a runner takes its lock before it claims anything, so a live runner's
-- row is swept only if that runner (re)took its lock while this statement ran and took the row over in
-- that instant; its lease token then refuses its writes, as for any lost lease. Rows locked by a live
-- holder's transaction are skipped (SKIP LOCKED).
WITH held AS MATERIALIZED (
    SELECT l.objid
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $4::integer::oid
      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
), gone AS MATERIALIZED (  -- found first, then updated by key (see cron_sweep_stale)
    SELECT c.id FROM sys_cron_executions c
    WHERE c.job_name = ANY($1::text[]) AND c.status = 'RUNNING'
      AND (c.runner_lock IS NULL OR NOT EXISTS (SELECT 1 FROM held WHERE held.objid = c.runner_lock::oid))
    FOR UPDATE SKIP LOCKED
)
UPDATE sys_cron_executions e
SET status = 'FAILED', error_code = 'runner_gone',
    error_message = 'the runner''s database session ended (its liveness lock is gone) before it finished',
    finished_at = $3, duration_ms = greatest(0, (extract(epoch FROM $3::timestamptz - e.started_at) * 1000)::integer),
    next_retry_at = CASE WHEN j.reentry AND e.attempt < e.max_attempts THEN $3 END
FROM gone, unnest($1::text[], $2::boolean[]) AS j(job_name, reentry)
WHERE e.id = gone.id AND e.job_name = j.job_name
RETURNING e.id, e.job_name, e.scope_id, e.plan_time, e.attempt, e.runner_id;

-- name: cron_claim
-- Win fresh plans of job $1 (scope kind $2): one row per (scope $3[i], plan $4[i]); a plan another
-- scheduler already holds conflicts and is skipped. $5 = max attempts, $6 = runner id, $7 = now,
-- $8 = stale timeout (s), $9 = single flight: the scope's flight slot must be free (unique index) and no
-- newer plan may exist, so a slow planner never fires an older occurrence after a newer one.
-- $10 = the runner's liveness lock key (scheduler/liveness.py), so others can tell when it is gone.
-- Rows are inserted in key order, so two schedulers racing on overlapping batches cannot deadlock.
INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status, attempt, max_attempts,
                                 runner_id, lease_token, heartbeat_at, stale_after, started_at, single_flight,
                                 runner_lock)
SELECT $1, $2, p.scope_id, p.plan_time, 'RUNNING', 1, $5, $6, gen_random_uuid(), $7,
       $7::timestamptz + make_interval(secs => $8), $7, $9, $10
FROM unnest($3::text[], $4::timestamptz[]) AS p(scope_id, plan_time)
WHERE NOT ($9 AND EXISTS (SELECT 1 FROM sys_cron_executions n
                          WHERE n.job_name = $1 AND n.scope_kind = $2 AND n.scope_id = p.scope_id
                            AND n.plan_time > p.plan_time))
ORDER BY p.scope_id, p.plan_time
ON CONFLICT DO NOTHING
RETURNING id, scope_id, plan_time, attempt, max_attempts, lease_token;

-- name: cron_claim_done
-- A transactional job's fresh plans, claimed already finished, by hookgate_cron_claim_done (the rule is
-- there: SUCCESS rows written once, a plan another scheduler holds conflicts and is skipped, so a caller that
-- gets fewer rows than plans must roll its handler's writes back). $1 = job, $2 = scope kind, $3/$4 = scopes
-- and plans, $5 = max attempts, $6 = runner id, $7 = claim time, $8 = stale timeout (s), $9 = single flight,
-- $10 = the runner's liveness key, $11 = finish time, $12 = results (JSON text).
SELECT id, scope_id, plan_time, lease_token
FROM hookgate_cron_claim_done($1, $2, $3::text[], $4::timestamptz[], $5, $6, $7, $8, $9, $10, $11, $12::text[]);

-- name: cron_attempt_limits
-- For the rest of a transactional attempt (a savepoint: rolled back with it), bound its lock waits by $1
-- and each statement by $2 (e.g. '1000ms', '120000ms'): an attempt that cannot finish quickly gives up and
-- its plans are claimed the ordinary way, durably, with heartbeats and liveness.
SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true);

-- name: cron_takeover
-- Take over up to $6 rows of job $1 in ONE guarded statement: a FAILED row whose retry is due
-- (next_retry_at <= $2 = now), or, with stale re-entry ($5), a RUNNING row past stale_after; only while
-- attempt < max_attempts. The lease token rotates, so the previous holder's writes no longer match.
-- $3 = runner id, $4 = stale timeout (s), $7 = the runner's liveness lock key.
WITH due AS MATERIALIZED (  -- found first, then updated by key (see cron_sweep_stale)
    SELECT c.id FROM sys_cron_executions c
    WHERE c.job_name = $1 AND c.attempt < c.max_attempts
      AND ((c.status = 'FAILED' AND c.next_retry_at <= $2) OR ($5 AND c.status = 'RUNNING' AND c.stale_after < $2))
    ORDER BY coalesce(c.next_retry_at, c.stale_after), c.id
    LIMIT $6
    FOR UPDATE SKIP LOCKED
)
UPDATE sys_cron_executions e
SET status = 'RUNNING', attempt = e.attempt + 1, lease_token = gen_random_uuid(), runner_id = $3, runner_lock = $7,
    heartbeat_at = $2, stale_after = $2::timestamptz + make_interval(secs => $4), started_at = $2,
    finished_at = NULL, duration_ms = NULL, next_retry_at = NULL, result = NULL
FROM due
WHERE e.id = due.id AND e.attempt < e.max_attempts
  AND ((e.status = 'FAILED' AND e.next_retry_at <= $2) OR ($5 AND e.status = 'RUNNING' AND e.stale_after < $2))
RETURNING e.id, e.scope_id, e.plan_time, e.attempt, e.max_attempts, e.lease_token;

-- name: cron_heartbeat
-- Extend the leases of executions $1 held with tokens $2: stale_after = $3 (now) + $4 seconds.
-- Returns the ids still held; a missing id means the lease was lost (taken over or swept).
UPDATE sys_cron_executions e
SET heartbeat_at = $3, stale_after = $3::timestamptz + make_interval(secs => $4)
FROM unnest($1::bigint[], $2::uuid[]) AS h(id, token)
WHERE e.id = h.id AND e.lease_token = h.token AND e.status = 'RUNNING'
RETURNING e.id;

-- name: cron_hold
-- Lock, in the caller's transaction, the executions $1 still held with tokens $2, so nobody can sweep
-- or take them over until the transaction ends. Returns the ids held; the others' leases are lost.
SELECT e.id
FROM sys_cron_executions e
JOIN unnest($1::bigint[], $2::uuid[]) AS h(id, token) ON e.id = h.id AND e.lease_token = h.token
WHERE e.status = 'RUNNING'
ORDER BY e.id
FOR UPDATE OF e;

-- name: cron_succeed
-- Terminal SUCCESS for executions $1 held with tokens $2, results $3 (JSON text), at $4 (now).
-- Guarded by the token: a holder that lost its lease updates nothing and its result is ignored.
UPDATE sys_cron_executions e
SET status = 'SUCCESS', finished_at = $4, result = s.result::jsonb, next_retry_at = NULL,
    duration_ms = greatest(0, (extract(epoch FROM $4::timestamptz - e.started_at) * 1000)::integer),
    error_code = NULL, error_message = NULL
FROM unnest($1::bigint[], $2::uuid[], $3::text[]) AS s(id, token, result)
WHERE e.id = s.id AND e.lease_token = s.token AND e.status = 'RUNNING'
RETURNING e.id;

-- name: cron_fail
-- Terminal FAILED for executions $1 held with tokens $2, at $3 (now), with error code $4 and message $5;
-- $6[i] = when the retry is due (NULL: attempts exhausted, no retry). Guarded by the token.
UPDATE sys_cron_executions e
SET status = 'FAILED', finished_at = $3, error_code = $4, error_message = left($5, 2000),
    next_retry_at = f.retry_at,
    duration_ms = greatest(0, (extract(epoch FROM $3::timestamptz - e.started_at) * 1000)::integer)
FROM unnest($1::bigint[], $2::uuid[], $6::timestamptz[]) AS f(id, token, retry_at)
WHERE e.id = f.id AND e.lease_token = f.token AND e.status = 'RUNNING'
RETURNING e.id;

-- name: cron_scope_state
-- For job $1, scope kind $2 and scopes $3: the newest plan claimed so far (the catch-up watermark) and
-- whether the scope's flight slot is taken (a RUNNING row or a FAILED row waiting for its retry).
SELECT s.scope_id,
       (SELECT max(e.plan_time) FROM sys_cron_executions e
        WHERE e.job_name = $1 AND e.scope_kind = $2 AND e.scope_id = s.scope_id) AS last_plan,
       EXISTS (SELECT 1 FROM sys_cron_executions e
               WHERE e.job_name = $1 AND e.scope_kind = $2 AND e.scope_id = s.scope_id
                 AND (e.status = 'RUNNING' OR (e.status = 'FAILED' AND e.next_retry_at IS NOT NULL))) AS in_flight
FROM unnest($3::text[]) AS s(scope_id);

-- name: cron_next_wake
-- The earliest time generic work of jobs $1 (the jobs this scheduler runs) falls due: a retry
-- (next_retry_at), a lease going stale (stale_after), or $3 (now + the liveness poll) while another
-- runner (liveness key other than $2, this runner's) holds a RUNNING row: if that runner dies, its row
-- is swept at the next tick, so this scheduler looks again soon. Rows of other jobs (renamed, or not
-- deployed on this replica) must not keep this scheduler awake.
SELECT least((SELECT min(next_retry_at) FROM sys_cron_executions
              WHERE status = 'FAILED' AND job_name = ANY($1::text[])),
             (SELECT min(stale_after) FROM sys_cron_executions
              WHERE status = 'RUNNING' AND job_name = ANY($1::text[])),
             (SELECT $3::timestamptz WHERE EXISTS (
                  SELECT 1 FROM sys_cron_executions
                  WHERE status = 'RUNNING' AND job_name = ANY($1::text[])
                    AND runner_lock IS DISTINCT FROM $2::integer))) AS at;

-- name: cron_delete_finished
-- Retention: delete up to $2 finished executions (SUCCESS, or FAILED with no retry left) that finished
-- before $1. Returns how many were deleted. A row waiting for a retry is never deleted.
WITH gone AS (
    DELETE FROM sys_cron_executions
    WHERE id IN (SELECT id FROM sys_cron_executions
                 WHERE status <> 'RUNNING' AND finished_at < $1
                   AND NOT (status = 'FAILED' AND next_retry_at IS NOT NULL)
                 ORDER BY finished_at
                 LIMIT $2)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: cron_hold_guard
-- For the rest of the caller's transaction, end the session if it sits idle in the transaction longer
-- than $1 (e.g. '300000ms', the stale timeout): a frozen holder then releases its row locks, so its
-- executions can go stale and be taken over instead of staying locked forever.
SELECT set_config('idle_in_transaction_session_timeout', $1, true);

-- name: cron_runner_lock
-- Take this runner's liveness lock, for the life of the session: $1 = the lock space, $2 = the runner's
-- key. False if another session holds that key (the caller then picks another key). Never waits.
SELECT pg_try_advisory_lock($1::integer, $2::integer) AS locked;

-- name: cron_runner_unlock
-- Release this runner's liveness lock before its pooled session goes back to the pool (the pool resets
-- no session state): $1 = the lock space, $2 = the runner's key.
SELECT pg_advisory_unlock($1::integer, $2::integer) AS unlocked;
