-- ops: indexes the operations views need, so metrics scrapes and the dashboard stay cheap.
-- (Assigned number 0006; numbered as the next free one until migrations 0002-0005 are on main.)

-- Queue depth of runs waiting for dispatch (hookgate_queue_depth{queue="runs_pending"}): only pending rows.
CREATE INDEX IF NOT EXISTS autopilot_run_pending_idx ON autopilot_run (created_at) WHERE status = 'pending';

-- The dashboard's "expired leases today" counts EXPIRE entries by time; audit_log_action_idx covers it.
-- Recent failures per workspace: failed runs newest first.
CREATE INDEX IF NOT EXISTS autopilot_run_failed_idx ON autopilot_run (workspace_id, updated_at DESC) WHERE status = 'failed';
