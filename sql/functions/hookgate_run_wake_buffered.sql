-- hookgate_run_wake_buffered: the trigger function that wakes the run worker for a buffered run when the run
-- ahead of it ends (since 0017_failure_window_buffer_one).
-- Overlap policy buffer_one keeps one run of a schedule trigger active and one waiting (pending, reason_code
-- 'buffered'). Whatever ends a schedule run (task finish, failure, cancel, skip), this notifies
-- hookgate_runs with the oldest waiting run of its trigger, so a worker dispatches it at once instead of at
-- its next poll. A NOTIFY costs a lock at commit: it is sent only when a run waits.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

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
