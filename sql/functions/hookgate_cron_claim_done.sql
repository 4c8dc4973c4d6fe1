-- hookgate_cron_claim_done: a transactional job's fresh plans, claimed already finished (since 0022_fire_batch).
-- Its handler's writes were made in this same transaction, so each execution row is written once, as
-- SUCCESS, and commits with them (or not at all). The winner rule is cron_claim's: a plan another scheduler
-- holds conflicts and is skipped (one it is inserting right now: the unique key waits for that transaction,
-- then conflicts), so a caller that gets fewer rows than plans must roll its handler's writes back.
-- p_single_flight: the scope must have no newer plan and no occurrence in flight (the flight index cannot
-- see a row that is not RUNNING). One function, so that the generic claim (cron_claim_done) and the
-- autopilot schedule job's one-statement firing (trigger_fire) claim by the same rule.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_cron_claim_done(
    p_job text, p_scope_kind text, p_scopes text[], p_plans timestamptz[], p_max_attempts integer,
    p_runner text, p_claimed_at timestamptz, p_stale_s double precision, p_single_flight boolean,
    p_runner_lock integer, p_finished_at timestamptz, p_results text[])
RETURNS TABLE (id bigint, scope_id text, plan_time timestamptz, lease_token uuid)
LANGUAGE sql VOLATILE AS $$
    INSERT INTO sys_cron_executions AS e (job_name, scope_kind, scope_id, plan_time, status, attempt, max_attempts,
                                          runner_id, lease_token, heartbeat_at, stale_after, started_at,
                                          single_flight, runner_lock, finished_at, duration_ms, result)
    SELECT p_job, p_scope_kind, p.scope_id, p.plan_time, 'SUCCESS', 1, p_max_attempts, p_runner, gen_random_uuid(),
           p_claimed_at, p_claimed_at + make_interval(secs => p_stale_s), p_claimed_at, p_single_flight,
           p_runner_lock, p_finished_at,
           greatest(0, (extract(epoch FROM p_finished_at - p_claimed_at) * 1000)::integer), p.result::jsonb
    FROM unnest(p_scopes, p_plans, p_results) AS p(scope_id, plan_time, result)
    -- Two probes, each by its own index (the unique key's range; the flight index), never a scan of the
    -- scope's whole history.
    WHERE NOT (p_single_flight
               AND (EXISTS (SELECT 1 FROM sys_cron_executions n
                            WHERE n.job_name = p_job AND n.scope_kind = p_scope_kind AND n.scope_id = p.scope_id
                              AND n.plan_time > p.plan_time)
                    OR EXISTS (SELECT 1 FROM sys_cron_executions f
                               WHERE f.job_name = p_job AND f.scope_kind = p_scope_kind AND f.scope_id = p.scope_id
                                 AND f.single_flight
                                 AND (f.status = 'RUNNING' OR (f.status = 'FAILED' AND f.next_retry_at IS NOT NULL)))))
    ORDER BY p.scope_id, p.plan_time
    ON CONFLICT DO NOTHING
    RETURNING e.id, e.scope_id, e.plan_time, e.lease_token
$$;
