-- 0007_scheduler_perf: one index fewer to maintain on every execution row written.

-- sys_cron_executions_scope_idx (job_name, scope_kind, scope_id, plan_time DESC) repeats the columns of the
-- table's UNIQUE (job_name, scope_kind, scope_id, plan_time) index, which PostgreSQL reads backwards just as
-- well for "the newest plan of a scope" (the planner's watermark) and "a newer plan exists" (the claim's
-- guard). Every claim and every terminal write paid for both.
DROP INDEX sys_cron_executions_scope_idx;
