-- Time partitions, and retention by dropping them (docs/SCALING.md, "Partitions").
--
-- webhook_delivery (a day per partition) and task_attempt (a week) are partitioned by RANGE of their UUIDv7 id,
-- whose 48-bit prefix is the time the caller made it: the primary key (id) stays valid on the partitioned
-- table, a lookup by id prunes to one partition, and a partition's bound is a time (hookgate_uuid7_floor).
-- audit_log (a month) has a bigint identity id, so it is partitioned by its time `at` and its key is (id, at).
-- The `partitions` maintenance job creates partitions ahead and drops those past retention; this migration
-- creates the first ones ahead too.
--
-- An existing table is not rewritten: it is renamed to <table>_legacy, a CHECK that matches its bound is
-- validated (one scan, under the lock this transaction holds anyway), and it is attached as the first
-- partition, FROM (MINVALUE) TO the first boundary after its newest row; its indexes are renamed and attached
-- to the parent's (same definitions, so nothing is rebuilt). What is built: audit_log_legacy gets the
-- unique index (id, at) the new key needs, webhook_delivery_legacy the two partial indexes of its queued rows
-- the bounded take needs (webhook_delivery_fair_idx with id, webhook_delivery_queued_idx; its old fair index
-- goes), and webhook_delivery_dedupe is filled from the live dedupe keys.
--
-- Foreign keys go where a partition is the referencing or the referenced side: dropping a partition that
-- references workspace, autopilot or autopilot_trigger takes a lock on those tables that every ingest's
-- lookup would queue behind, and a partition referenced by autopilot_run or a replay could not be dropped.
-- Workspaces, autopilots and triggers are never deleted (a trigger is soft-deleted), so nothing dangles but
-- what retention drops on purpose: a run, or a replay, keeps the id of a delivery that retention removed.


CREATE FUNCTION hookgate_uuid7_floor(p_at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(int8send(floor(extract(epoch FROM p_at) * 1000)::bigint) FROM 3)
                  || '\x00000000000000000000'::bytea, 'hex')::uuid
$$;

CREATE FUNCTION hookgate_partition_bounds(p_parent regclass)
RETURNS TABLE (partition_name text, lower_at timestamptz, upper_at timestamptz, detach_pending boolean)
LANGUAGE sql STABLE SET datestyle = 'ISO, YMD' SET timezone = 'UTC' AS $$
    SELECT c.relname::text,
           CASE WHEN b.lo = 'MINVALUE' THEN NULL
                WHEN b.lo ~ '^''[0-9a-f]{8}-' THEN to_timestamp(('x' || substr(replace(btrim(b.lo, ''''), '-', ''), 1, 12))::bit(48)::bigint / 1000.0)
                ELSE btrim(b.lo, '''')::timestamptz END,
           CASE WHEN b.hi = 'MAXVALUE' THEN NULL
                WHEN b.hi ~ '^''[0-9a-f]{8}-' THEN to_timestamp(('x' || substr(replace(btrim(b.hi, ''''), '-', ''), 1, 12))::bit(48)::bigint / 1000.0)
                ELSE btrim(b.hi, '''')::timestamptz END,
           i.inhdetachpending
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (
        SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \((.*)\) TO ') AS lo,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM ' TO \((.*)\)$') AS hi
    ) b
    WHERE i.inhparent = p_parent
    ORDER BY 3
$$;

CREATE FUNCTION hookgate_partitions_ensure(p_now timestamptz) RETURNS SETOF text
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

CREATE FUNCTION hookgate_partitions_expired(p_now timestamptz, p_deliveries interval, p_attempts interval,
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

CREATE FUNCTION hookgate_delivery_dedupe_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_delivery_dedupe (trigger_id, dedupe_key, delivery_id)
    VALUES (NEW.trigger_id, NEW.dedupe_key, NEW.id)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION hookgate_delivery_dedupe_follow() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('rejected', 'failed') THEN
        DELETE FROM webhook_delivery_dedupe
        WHERE trigger_id = OLD.trigger_id AND dedupe_key = OLD.dedupe_key AND delivery_id = OLD.id;
    ELSE
        INSERT INTO webhook_delivery_dedupe (trigger_id, dedupe_key, delivery_id)
        VALUES (NEW.trigger_id, NEW.dedupe_key, NEW.id);
    END IF;
    RETURN NULL;
END
$$;

ALTER TABLE autopilot_run DROP CONSTRAINT autopilot_run_webhook_delivery_id_fkey;
ALTER TABLE webhook_delivery DROP CONSTRAINT webhook_delivery_workspace_id_fkey,
                             DROP CONSTRAINT webhook_delivery_trigger_id_fkey,
                             DROP CONSTRAINT webhook_delivery_autopilot_id_fkey,
                             DROP CONSTRAINT webhook_delivery_replayed_from_delivery_id_fkey;
ALTER TABLE audit_log DROP CONSTRAINT audit_log_workspace_id_fkey;

-- ---------------------------------------------------------------------------------------------
-- webhook_delivery
-- ---------------------------------------------------------------------------------------------
ALTER TABLE webhook_delivery RENAME TO webhook_delivery_legacy;
ALTER INDEX webhook_delivery_pkey RENAME TO webhook_delivery_legacy_pkey;
ALTER INDEX webhook_delivery_queue_idx RENAME TO webhook_delivery_legacy_queue_idx;
ALTER INDEX webhook_delivery_trigger_idx RENAME TO webhook_delivery_legacy_trigger_idx;
ALTER INDEX webhook_delivery_workspace_idx RENAME TO webhook_delivery_legacy_workspace_idx;
ALTER INDEX webhook_delivery_trigger_queue_idx RENAME TO webhook_delivery_legacy_trigger_queue_idx;
ALTER INDEX webhook_delivery_body_retention_idx RENAME TO webhook_delivery_legacy_body_retention_idx;
ALTER INDEX webhook_delivery_rejected_idx RENAME TO webhook_delivery_legacy_rejected_idx;
-- Rebuilt below with id as a last column.
DROP INDEX webhook_delivery_fair_idx;
-- The parent's check is a valid one; the legacy table's was added NOT VALID (0011): one scan proves it.
ALTER TABLE webhook_delivery_legacy VALIDATE CONSTRAINT webhook_delivery_body_mismatch_count_check;

-- The same columns, defaults and checks as the legacy table (it must match them to be attached); no foreign
-- key (LIKE copies none): the delivery a replay copies may be gone by retention, and see the header.
CREATE TABLE webhook_delivery (
    LIKE webhook_delivery_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    CONSTRAINT webhook_delivery_pkey PRIMARY KEY (id)
) PARTITION BY RANGE (id);
CREATE INDEX webhook_delivery_queue_idx ON webhook_delivery (available_at, received_at) WHERE status = 'queued';
CREATE INDEX webhook_delivery_trigger_idx ON webhook_delivery (trigger_id, id DESC);
CREATE INDEX webhook_delivery_workspace_idx ON webhook_delivery (workspace_id, id DESC);
CREATE INDEX webhook_delivery_trigger_queue_idx ON webhook_delivery (trigger_id, available_at) WHERE status = 'queued';
CREATE INDEX webhook_delivery_body_retention_idx ON webhook_delivery (received_at)
    WHERE body IS NOT NULL AND status <> 'queued';
CREATE INDEX webhook_delivery_rejected_idx ON webhook_delivery (received_at, trigger_id) WHERE status = 'rejected';
-- The take's probes are bounded to the id range of the queued deliveries, so that PostgreSQL prunes the
-- partitions outside it (hookgate_delivery_take). Two indexes for that, both new, which attaching the legacy
-- table builds there (a scan of it each; they hold its queued rows only):
-- - the fair index gets id as a last column, so the bound is checked in it: without that, the generic plan
--   (which prices a range of two parameters at 0.5 % of the rows) walked webhook_delivery_workspace_idx,
--   over delivered rows too, instead of this index of the queued ones;
-- - the ids of the queued rows, for the bounds themselves. Its predicate carries `dispatch_attempts >= 0`
--   (always true, a CHECK of the table) so that no other query can use it: the take's probes, offered it,
--   read the whole queue in id order and sorted it instead of walking the fair index.
CREATE INDEX webhook_delivery_fair_idx ON webhook_delivery (workspace_id, trigger_id, available_at, id)
    WHERE status = 'queued';
CREATE INDEX webhook_delivery_queued_idx ON webhook_delivery (id) WHERE status = 'queued' AND dispatch_attempts >= 0;

-- Promise 3 across partitions: one delivery per (trigger, dedupe key) while it counts (neither rejected nor
-- failed). Holds exactly the keys that count; kept in step by the two triggers below; a key goes with its
-- delivery's partition (the partitions job releases the keys of a partition before it drops it).
CREATE TABLE webhook_delivery_dedupe (
    trigger_id   uuid NOT NULL,
    dedupe_key   text NOT NULL,
    delivery_id  uuid NOT NULL,
    PRIMARY KEY (trigger_id, dedupe_key)
);
CREATE INDEX webhook_delivery_dedupe_delivery_idx ON webhook_delivery_dedupe (delivery_id);
INSERT INTO webhook_delivery_dedupe (trigger_id, dedupe_key, delivery_id)
SELECT trigger_id, dedupe_key, id FROM webhook_delivery_legacy
WHERE dedupe_key IS NOT NULL AND status NOT IN ('rejected', 'failed');
DROP INDEX webhook_delivery_dedupe_uq;

CREATE TRIGGER webhook_delivery_dedupe_claim
    BEFORE INSERT ON webhook_delivery
    FOR EACH ROW WHEN (NEW.dedupe_key IS NOT NULL AND NEW.status NOT IN ('rejected', 'failed'))
    EXECUTE FUNCTION hookgate_delivery_dedupe_claim();
CREATE TRIGGER webhook_delivery_dedupe_follow
    AFTER UPDATE OF status ON webhook_delivery
    FOR EACH ROW WHEN (OLD.dedupe_key IS NOT NULL
                       AND (OLD.status IN ('rejected', 'failed')) <> (NEW.status IN ('rejected', 'failed')))
    EXECUTE FUNCTION hookgate_delivery_dedupe_follow();

DO $$
DECLARE
    v_newest uuid;
    v_bound uuid;
BEGIN
    SELECT id INTO v_newest FROM webhook_delivery_legacy ORDER BY id DESC LIMIT 1;
    v_bound := hookgate_uuid7_floor(date_trunc('day', greatest(now(), to_timestamp(
        ('x' || substr(replace(v_newest::text, '-', ''), 1, 12))::bit(48)::bigint / 1000.0)), 'UTC') + interval '1 day');
    EXECUTE format('ALTER TABLE webhook_delivery_legacy ADD CONSTRAINT webhook_delivery_legacy_bound '
                   'CHECK (id < %L) NOT VALID', v_bound);
    ALTER TABLE webhook_delivery_legacy VALIDATE CONSTRAINT webhook_delivery_legacy_bound;
    EXECUTE format('ALTER TABLE webhook_delivery ATTACH PARTITION webhook_delivery_legacy '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', v_bound);
    ALTER TABLE webhook_delivery_legacy DROP CONSTRAINT webhook_delivery_legacy_bound;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- task_attempt
-- ---------------------------------------------------------------------------------------------
ALTER TABLE task_attempt RENAME TO task_attempt_legacy;
ALTER INDEX task_attempt_pkey RENAME TO task_attempt_legacy_pkey;
ALTER INDEX task_attempt_task_idx RENAME TO task_attempt_legacy_task_idx;
ALTER INDEX task_attempt_finished_idx RENAME TO task_attempt_legacy_finished_idx;

CREATE TABLE task_attempt (
    LIKE task_attempt_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    CONSTRAINT task_attempt_pkey PRIMARY KEY (id)
) PARTITION BY RANGE (id);
CREATE INDEX task_attempt_task_idx ON task_attempt (task_id, id);
CREATE INDEX task_attempt_finished_idx ON task_attempt (finished_at);

DO $$
DECLARE
    v_newest uuid;
    v_bound uuid;
BEGIN
    SELECT id INTO v_newest FROM task_attempt_legacy ORDER BY id DESC LIMIT 1;
    v_bound := hookgate_uuid7_floor(date_trunc('week', greatest(now(), to_timestamp(
        ('x' || substr(replace(v_newest::text, '-', ''), 1, 12))::bit(48)::bigint / 1000.0)), 'UTC') + interval '1 week');
    EXECUTE format('ALTER TABLE task_attempt_legacy ADD CONSTRAINT task_attempt_legacy_bound '
                   'CHECK (id < %L) NOT VALID', v_bound);
    ALTER TABLE task_attempt_legacy VALIDATE CONSTRAINT task_attempt_legacy_bound;
    EXECUTE format('ALTER TABLE task_attempt ATTACH PARTITION task_attempt_legacy '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', v_bound);
    ALTER TABLE task_attempt_legacy DROP CONSTRAINT task_attempt_legacy_bound;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- audit_log
-- ---------------------------------------------------------------------------------------------
ALTER TABLE audit_log RENAME TO audit_log_legacy;
ALTER SEQUENCE audit_log_id_seq RENAME TO audit_log_legacy_id_seq;
ALTER INDEX audit_log_pkey RENAME TO audit_log_legacy_pkey;
ALTER INDEX audit_log_subject_idx RENAME TO audit_log_legacy_subject_idx;
ALTER INDEX audit_log_workspace_idx RENAME TO audit_log_legacy_workspace_idx;
ALTER INDEX audit_log_action_idx RENAME TO audit_log_legacy_action_idx;

CREATE TABLE audit_log (
    id            bigint GENERATED ALWAYS AS IDENTITY,
    workspace_id  uuid,
    at            timestamptz NOT NULL DEFAULT now(),
    action        text NOT NULL,
    actor_type    text NOT NULL,
    actor_id      text,
    subject_type  text NOT NULL,
    subject_id    text,
    detail        jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT audit_log_pkey PRIMARY KEY (id, at),
    CONSTRAINT audit_log_action_check CHECK (action ~ '^[A-Z][A-Z_]*$'),
    CONSTRAINT audit_log_actor_type_check CHECK (actor_type IN ('member', 'agent', 'runtime', 'system', 'worker',
                                                                'scheduler', 'anonymous'))
) PARTITION BY RANGE (at);
CREATE INDEX audit_log_subject_idx ON audit_log (subject_id, id DESC);
CREATE INDEX audit_log_workspace_idx ON audit_log (workspace_id, id DESC);
CREATE INDEX audit_log_action_idx ON audit_log (action, at);
-- The ids go on where the old table's left off.
SELECT setval('audit_log_id_seq', s.last_value, s.is_called) FROM audit_log_legacy_id_seq s;
-- The row trigger is cloned to every partition; the statement trigger is not, so every partition has its own.
CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION hookgate_refuse_change();
CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION hookgate_refuse_change();
-- Cloned again from the parent when attached.
DROP TRIGGER audit_log_append_only ON audit_log_legacy;
-- A partition takes its ids from the parent's identity (its own would be refused when attached).
ALTER TABLE audit_log_legacy ALTER COLUMN id DROP IDENTITY;
-- A table has one primary key: the old one, on id alone, makes way for (id, at), which attaching builds.
ALTER TABLE audit_log_legacy DROP CONSTRAINT audit_log_legacy_pkey;

DO $$
DECLARE
    v_bound timestamptz;
BEGIN
    v_bound := date_trunc('month', greatest(now(), (SELECT max(at) FROM audit_log_legacy)), 'UTC') + interval '1 month';
    EXECUTE format('ALTER TABLE audit_log_legacy ADD CONSTRAINT audit_log_legacy_bound CHECK (at < %L) NOT VALID',
                   v_bound);
    ALTER TABLE audit_log_legacy VALIDATE CONSTRAINT audit_log_legacy_bound;
    EXECUTE format('ALTER TABLE audit_log ATTACH PARTITION audit_log_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
                   v_bound);
    ALTER TABLE audit_log_legacy DROP CONSTRAINT audit_log_legacy_bound;
END
$$;
SELECT count(*) FROM hookgate_partitions_ensure(now());
