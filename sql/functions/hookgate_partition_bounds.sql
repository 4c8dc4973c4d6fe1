-- hookgate_partition_bounds: the partitions of a table and the times they cover (since 0024_partitions).
-- One row per partition of `p_parent`: its name, the time its lower bound stands for (NULL for MINVALUE) and
-- that of its upper bound, read back from the catalog (a UUIDv7 bound is its millisecond prefix), and whether
-- a DETACH ... CONCURRENTLY of it was interrupted (it must be finalized). Fixed date style and time zone: the
-- bounds are printed by pg_get_expr in the session's.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_partition_bounds(p_parent regclass)
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
