-- 0017_failure_window_buffer_one: resuming an autopilot restarts its failure window; buffer_one runs wait for the run ahead.
--
-- autopilot.failure_window_since: set when the autopilot is resumed; the auto-pause rule counts only runs
-- created after it, so an autopilot paused for its failures is not paused again by the same failures at the
-- next tick after a member resumed it.

ALTER TABLE autopilot ADD COLUMN failure_window_since timestamptz;

-- Overlap policy buffer_one: a buffered run (pending, reason_code 'buffered') waits until the unfinished run
-- of its trigger ends; this trigger wakes the run worker for it then (live definition of the function in
-- sql/functions/hookgate_run_wake_buffered.sql). Only schedule runs have an overlap policy, so the WHEN
-- clause keeps webhook runs, the hot path, from ever calling it; nor does an occurrence the overlap policy
-- skipped as soon as it was admitted (nothing was ahead of the waiting run).
CREATE OR REPLACE FUNCTION hookgate_run_wake_buffered() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookgate_runs', w.id::text)
    FROM (SELECT r.id FROM autopilot_run r
          WHERE r.trigger_id = NEW.trigger_id AND r.status = 'pending' AND r.reason_code = 'buffered'
            AND r.id <> NEW.id
          ORDER BY r.created_at, r.id
          LIMIT 1) w;
    RETURN NULL;
END
$$;

CREATE TRIGGER autopilot_run_wake_buffered
    AFTER UPDATE OF status ON autopilot_run
    FOR EACH ROW
    WHEN (NEW.source = 'schedule' AND NEW.trigger_id IS NOT NULL
          AND NEW.status IN ('completed', 'failed', 'cancelled', 'skipped')
          AND NEW.reason_code IS DISTINCT FROM 'previous_run_active'  -- an occurrence skipped on admission
          AND OLD.status NOT IN ('completed', 'failed', 'cancelled', 'skipped'))
    EXECUTE FUNCTION hookgate_run_wake_buffered();
