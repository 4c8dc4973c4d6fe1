-- 0025_run_claims: the runs loop finds its work by index instead of reading every pending run.
--
-- Its claim took the oldest pending run that was either without a delivery (manual, api, schedule) or stale,
-- from autopilot_run_pending_idx: every pending webhook run (whose delivery is the delivery path's) was read
-- and filtered out on each claim, one run per claim. With 20,000 webhook runs waiting that was ~7 ms per claim,
-- paid again for every schedule-fired run dispatched behind them. Now two claims, each on its own index:
-- - the runs admitted without a delivery, what the loop dispatches (run_claim_undispatched);
-- - the runs left half-made past the repair delay (run_claim_stale): a stale pending webhook run is found on
--   autopilot_run_pending_idx within its age bound, an issue without its task on the index below.
CREATE INDEX autopilot_run_undispatched_idx ON autopilot_run (updated_at)
    WHERE status = 'pending' AND webhook_delivery_id IS NULL;
CREATE INDEX autopilot_run_half_made_idx ON autopilot_run (updated_at)
    WHERE status = 'issue_created' AND task_id IS NULL;
