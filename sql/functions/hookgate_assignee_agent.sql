-- hookgate_assignee_agent: the agent an autopilot's assignee resolves to (since 0015_one_dispatch_path).
-- p_assignee_type 'agent': that agent; 'squad': the squad's leader. Only an agent of the autopilot's workspace
-- p_workspace_id counts; archived ones are returned (callers tell "archived" from "missing"). Zero or one row.
-- Used LATERAL in FROM (admission, ingress, run dispatch, the take): a LANGUAGE sql STABLE set-returning
-- function of one SELECT is inlined by the planner, so the agent is read by primary key in the caller's plan.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_assignee_agent(p_assignee_type text, p_assignee_id uuid, p_workspace_id uuid)
RETURNS SETOF agent
LANGUAGE sql STABLE AS $$
    SELECT ag.* FROM agent ag
    WHERE ag.id = CASE WHEN p_assignee_type = 'agent' THEN p_assignee_id
                       ELSE (SELECT s.leader_agent_id FROM squad s WHERE s.id = p_assignee_id) END
      AND ag.workspace_id = p_workspace_id
$$;
