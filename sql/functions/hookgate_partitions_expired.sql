-- hookgate_partitions_expired: the partitions retention drops (since 0024_partitions).
-- Partitions whose whole range ended before `p_now` minus their table's retention (NULL: keep forever):
-- `p_deliveries` for webhook_delivery, `p_attempts` for task_attempt, `p_audit` for audit_log. A delivery
-- partition that still holds a queued delivery is kept (its partial queue index makes that a probe) until
-- the worker is done with it. Also every partition left half-detached by an interrupted DETACH ... CONCURRENTLY,
-- whatever its age (it must be finalized, and comes first: PostgreSQL lets one partition of a table be pending
-- detach at a time). The bounds come back as ids for a delivery partition, so the
-- caller can first release the dedupe keys of its rows; the statements to run come back quoted: `detach_sql`
-- (DETACH ... CONCURRENTLY or FINALIZE, outside a transaction) then `drop_sql`.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_partitions_expired(p_now timestamptz, p_deliveries interval, p_attempts interval,
                                                       p_audit interval)
RETURNS TABLE (parent text, partition_name text, upper_at timestamptz, lower_id uuid, upper_id uuid, detach_sql text,
               drop_sql text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s record;
    b record;
    v_queued boolean;
BEGIN
    FOR s IN SELECT * FROM (VALUES ('webhook_delivery', p_deliveries), ('task_attempt', p_attempts),
                                   ('audit_log', p_audit)) AS s(parent, keep) LOOP
        FOR b IN SELECT * FROM hookgate_partition_bounds(s.parent::regclass) x
                 WHERE x.detach_pending OR (s.keep IS NOT NULL AND x.upper_at <= p_now - s.keep)
                 ORDER BY x.detach_pending DESC, x.upper_at LOOP
            IF s.parent = 'webhook_delivery' AND NOT b.detach_pending THEN
                EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status = ''queued'')', b.partition_name)
                    INTO v_queued;
                CONTINUE WHEN v_queued;
            END IF;
            parent := s.parent;
            partition_name := b.partition_name;
            upper_at := b.upper_at;
            lower_id := CASE WHEN s.parent <> 'audit_log' THEN hookgate_uuid7_floor(b.lower_at) END;
            upper_id := CASE WHEN s.parent <> 'audit_log' THEN hookgate_uuid7_floor(b.upper_at) END;
            detach_sql := format('ALTER TABLE %I DETACH PARTITION %I %s', s.parent, b.partition_name,
                             CASE WHEN b.detach_pending THEN 'FINALIZE' ELSE 'CONCURRENTLY' END);
            drop_sql := format('DROP TABLE %I', b.partition_name);
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;
