-- hookgate_uuid7: time-ordered UUIDs, the default id of the append-heavy tables (since 0001_init).
-- Time-ordered UUIDs (UUIDv7 layout): 48-bit unix-millisecond prefix, then random bits. Index locality
-- for append-heavy tables, and ids that sort by creation. PostgreSQL 18 has uuidv7(); 15 does not.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_uuid7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
