-- hookgate_runtime_ready: whether an agent's runtime can take work now (since 0015_one_dispatch_path).
-- An HTTP agent (p_runtime_kind 'http') is ready when it has an endpoint; a pull agent when one of its
-- instances is online and heartbeated within p_heartbeat_s seconds before p_at. NULL agent columns (no agent):
-- false. One row, column ready. Used LATERAL in FROM: a LANGUAGE sql STABLE set-returning function of one
-- SELECT is inlined by the planner, so the test is an expression of the caller's plan (a scalar function with
-- a subquery would not be inlined, and would run as a separate call per row).
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_runtime_ready(p_agent_id uuid, p_runtime_kind text, p_endpoint_url text,
                                                  p_heartbeat_s double precision, p_at timestamptz)
RETURNS TABLE (ready boolean)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_runtime_kind = 'http' THEN p_endpoint_url IS NOT NULL
                ELSE EXISTS (SELECT 1 FROM agent_instance i
                             WHERE i.agent_id = p_agent_id AND i.status = 'online'
                               AND i.heartbeat_at > p_at - make_interval(secs => p_heartbeat_s))
           END
$$;
