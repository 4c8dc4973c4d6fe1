-- name: server_database_exists
-- Whether database $1 exists on this server (embedded mode creates the Hookgate database once).
SELECT 1 FROM pg_database WHERE datname = $1;

-- name: server_ping
-- The cheapest round trip: is the database there?
SELECT 1;
