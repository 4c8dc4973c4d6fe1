-- hookgate_partitions_ensure: creates the partitions ahead of time (since 0024_partitions).
-- From the upper bound of the newest partition on, one partition per step until `p_now` plus the lead:
-- webhook_delivery a day each, 7 days ahead, task_attempt a week each (Monday to Monday), 2 weeks ahead,
-- both by UUIDv7 id; audit_log a month each, 2 months ahead, by `at`; all boundaries in UTC. Returns the
-- names created. Each is made as a plain table and then attached: CREATE TABLE ... PARTITION OF would take
-- an ACCESS EXCLUSIVE lock on the parent (every insert would queue behind it), ATTACH PARTITION takes only
-- SHARE UPDATE EXCLUSIVE. Attaching builds the parent's indexes on the empty table and clones its row
-- triggers; a statement trigger is not cloned, so each audit_log partition gets its own refusal of TRUNCATE
-- (a TRUNCATE of a partition does not fire the parent's). Idempotent, and safe to run from several processes
-- (the second waits on the first's lock and then finds the partitions made).
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_partitions_ensure(p_now timestamptz) RETURNS SETOF text
LANGUAGE plpgsql SET timezone = 'UTC' AS $$
DECLARE
    s record;
    v_from timestamptz;
    v_to timestamptz;
    v_name text;
BEGIN
    FOR s IN SELECT * FROM (VALUES ('webhook_delivery', 'day', interval '7 days', 'YYYYMMDD', true),
                                   ('task_attempt', 'week', interval '14 days', 'YYYYMMDD', true),
                                   ('audit_log', 'month', interval '2 months', 'YYYYMM', false))
                           AS s(parent, unit, ahead, fmt, by_id) LOOP
        SELECT max(b.upper_at) INTO v_from FROM hookgate_partition_bounds(s.parent::regclass) b;
        CONTINUE WHEN v_from >= p_now + s.ahead;
        -- One creator at a time per table (the lock ATTACH takes anyway, taken first), then read again.
        EXECUTE format('LOCK TABLE %I IN SHARE UPDATE EXCLUSIVE MODE', s.parent);
        SELECT max(b.upper_at) INTO v_from FROM hookgate_partition_bounds(s.parent::regclass) b;
        v_from := coalesce(v_from, date_trunc(s.unit, p_now));
        WHILE v_from < p_now + s.ahead LOOP
            v_to := date_trunc(s.unit, v_from + ('1 ' || s.unit)::interval);
            v_name := s.parent || '_p' || to_char(v_from, s.fmt);
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_name, s.parent);
            IF s.parent = 'audit_log' THEN
                EXECUTE format('CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON %I '
                               'FOR EACH STATEMENT EXECUTE FUNCTION hookgate_refuse_change()', v_name);
            END IF;
            IF s.by_id THEN
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', s.parent, v_name,
                               hookgate_uuid7_floor(v_from), hookgate_uuid7_floor(v_to));
            ELSE
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', s.parent, v_name,
                               v_from, v_to);
            END IF;
            RETURN NEXT v_name;
            v_from := v_to;
        END LOOP;
    END LOOP;
END
$$;
