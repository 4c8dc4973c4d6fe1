-- hookgate_uuid7_floor: the smallest UUIDv7 of an instant (since 0024_partitions).
-- The 48-bit unix-millisecond prefix of `p_at` followed by zero bits. UUIDs compare byte by byte, so every
-- hookgate_uuid7() made at or after `p_at` sorts at or above it: the bound of a partition by id is a time.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_uuid7_floor(p_at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(int8send(floor(extract(epoch FROM p_at) * 1000)::bigint) FROM 3)
                  || '\x00000000000000000000'::bytea, 'hex')::uuid
$$;
