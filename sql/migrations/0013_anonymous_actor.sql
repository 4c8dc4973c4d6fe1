-- The audit log names an "anonymous" actor: a caller who proved nothing but a task id, such as a report
-- or renew for an HTTP agent's task sent without a runtime token and with a wrong lease token. Its
-- LATE_RESULT entry keeps only the size and SHA-256 of what was sent.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_actor_type_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_actor_type_check
    CHECK (actor_type IN ('member', 'agent', 'runtime', 'system', 'worker', 'scheduler', 'anonymous'));
