-- 0012_function_files: the bookkeeping of sql/functions/, the live definitions of the SQL functions.
--
-- From here on the current text of every function lives in one file, sql/functions/<name>.sql, and the
-- migrator re-applies a file (CREATE OR REPLACE, after the numbered migrations, under the same advisory
-- lock) when its checksum differs from the one recorded here. The migrations that created and altered the
-- functions stay as history; nobody has to replay them to read today's definition.
CREATE TABLE hookgate_functions (
    name        text PRIMARY KEY,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
