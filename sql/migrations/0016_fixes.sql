-- 0016_fixes: resuming an autopilot restarts its failure window.
--
-- autopilot.failure_window_since: set when the autopilot is resumed; the auto-pause rule counts only runs
-- created after it, so an autopilot paused for its failures is not paused again by the same failures at the
-- next tick after a member resumed it.

ALTER TABLE autopilot ADD COLUMN failure_window_since timestamptz;
