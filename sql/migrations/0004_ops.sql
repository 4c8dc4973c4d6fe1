-- ops: indexes the operations views need, so metrics scrapes and the dashboard stay cheap.
-- (Assigned number 0006; numbered as the next free one until the other areas' migrations are on main.)
-- The pending-run queue (hookgate_queue_depth{queue="runs_pending"}) uses dispatch's partial index on
-- pending runs; the EXPIRE count of the dashboard uses audit_log_action_idx.

-- Recent failures per workspace (dashboard): failed runs, newest first.
CREATE INDEX IF NOT EXISTS autopilot_run_failed_idx ON autopilot_run (workspace_id, updated_at DESC)
    WHERE status = 'failed';
