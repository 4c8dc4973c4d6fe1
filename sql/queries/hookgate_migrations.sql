-- name: migration_lock
-- Serialise migrators across processes. $1 = advisory lock key.
SELECT pg_advisory_lock($1);

-- name: migration_unlock
-- Release the migrators' advisory lock. $1 = advisory lock key.
SELECT pg_advisory_unlock($1);

-- name: migration_table_create
-- The bookkeeping table, created before the first migration runs.
CREATE TABLE IF NOT EXISTS hookgate_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: migration_table_exists
-- Whether any migration has ever run here.
SELECT to_regclass('hookgate_migrations') IS NOT NULL;

-- name: migration_applied_list
-- Every applied version with the checksum of the file that was applied.
SELECT version, checksum FROM hookgate_migrations ORDER BY version;

-- name: migration_record
-- Record one applied migration. $1 = version, $2 = file name, $3 = sha256 of the file.
INSERT INTO hookgate_migrations (version, name, checksum) VALUES ($1, $2, $3);
