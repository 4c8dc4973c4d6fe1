-- 0006_runner_liveness: which scheduler session holds each execution, so a dead runner is noticed at once.

-- A scheduler holds a session-level advisory lock for its whole life (scheduler/liveness.py) and writes
-- that lock's key on every execution it claims or takes over. When its process dies, PostgreSQL ends the
-- session and drops the lock, and the next tick of any scheduler fails the execution 'runner_gone'
-- instead of waiting for stale_after. NULL (rows claimed before this migration, or by a scheduler that
-- predates it) means "no lock": such rows are treated like those of a dead runner.
ALTER TABLE sys_cron_executions ADD COLUMN runner_lock integer;
