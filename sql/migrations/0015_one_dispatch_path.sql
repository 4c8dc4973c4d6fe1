-- 0015_one_dispatch_path: one dispatch path, and the pieces the dispatch statements shared by copy, written once.
--
-- The two-step fallback of the delivery take is gone: hookgate_dispatch_pending (the set-based dispatch of a
-- leased batch) and hookgate_task_claim_many (used only by it) are dropped; a take that fails is retried on the
-- worker's next pass. hookgate_assignee_agent (an autopilot's assignee to its agent, a squad to its leader)
-- and hookgate_runtime_ready (an agent's runtime can take work now) are new: inlined set-returning SQL
-- functions, used by admission, ingress, run dispatch and the take instead of their copies. Their live
-- definitions are in sql/functions/.

DROP FUNCTION hookgate_dispatch_pending(uuid[], uuid[], integer, double precision, text, integer, double precision,
                                        double precision);
DROP FUNCTION hookgate_task_claim_many(uuid, uuid[], double precision, text, timestamptz);

CREATE OR REPLACE FUNCTION hookgate_assignee_agent(p_assignee_type text, p_assignee_id uuid, p_workspace_id uuid)
RETURNS SETOF agent
LANGUAGE sql STABLE AS $$
    SELECT ag.* FROM agent ag
    WHERE ag.id = CASE WHEN p_assignee_type = 'agent' THEN p_assignee_id
                       ELSE (SELECT s.leader_agent_id FROM squad s WHERE s.id = p_assignee_id) END
      AND ag.workspace_id = p_workspace_id
$$;

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
