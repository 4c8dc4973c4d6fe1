-- 0004_scheduler (numbered 0002 on the scheduler branch until the lead renumbers it at merge):
-- single flight per scope, enforced by the database, and retention indexes.

-- A job may declare that a scope never has two occurrences in flight (autopilot schedules do). The
-- flight slot is held by a RUNNING row or by a FAILED row still waiting for its retry, so a newer
-- occurrence can neither overlap the running one nor strand an older failed retry (ARCHITECTURE §8).
ALTER TABLE sys_cron_executions ADD COLUMN single_flight boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX sys_cron_executions_flight_uq ON sys_cron_executions (job_name, scope_kind, scope_id)
    WHERE single_flight AND (status = 'RUNNING' OR (status = 'FAILED' AND next_retry_at IS NOT NULL));

-- Retention finds old finished executions and old finished deliveries that still hold a raw body
-- without scanning the live rows.
CREATE INDEX sys_cron_executions_finished_idx ON sys_cron_executions (finished_at)
    WHERE status <> 'RUNNING';
CREATE INDEX webhook_delivery_body_retention_idx ON webhook_delivery (received_at)
    WHERE body IS NOT NULL AND status <> 'queued';
