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

-- name: function_table_exists
-- Whether the bookkeeping of the function files exists yet (migration 0012 creates it).
SELECT to_regclass('hookgate_functions') IS NOT NULL;

-- name: function_applied_list
-- Every function file applied here with the checksum of the text that was applied.
SELECT name, checksum FROM hookgate_functions ORDER BY name;

-- name: function_record
-- Record one applied function file. $1 = function name (the file's stem), $2 = sha256 of the file.
INSERT INTO hookgate_functions (name, checksum) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now();

-- name: function_forget_others
-- Forget the records of files no longer shipped, so a file added again is applied again. $1 = shipped names.
DELETE FROM hookgate_functions WHERE name <> ALL ($1::text[]);
