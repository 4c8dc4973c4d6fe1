-- 0019_run_deadlines: an autopilot may give its runs a deadline; a failed or cancelled run can be retried.
--
-- autopilot.run_timeout_s (seconds, NULL = none): a run of the autopilot not finished that long after it was
-- created, or after its latest retry (autopilot_run.retried_at), ends failed (deadline_exceeded) and its
-- tasks are cancelled, by the scheduler's run_deadlines maintenance job.
ALTER TABLE autopilot
    ADD COLUMN run_timeout_s integer CHECK (run_timeout_s IS NULL OR run_timeout_s >= 1);
ALTER TABLE autopilot_run
    ADD COLUMN retried_at timestamptz;

-- The deadline sweep: the few autopilots with a timeout, then each one's unfinished runs oldest first, so a
-- sweep reads only the runs that are due (never the finished history, never autopilots without a timeout).
CREATE INDEX autopilot_timeout_idx ON autopilot (id) WHERE run_timeout_s IS NOT NULL;
CREATE INDEX autopilot_run_deadline_idx ON autopilot_run (autopilot_id, (coalesce(retried_at, created_at)))
    WHERE status IN ('pending', 'issue_created', 'queued', 'running');
