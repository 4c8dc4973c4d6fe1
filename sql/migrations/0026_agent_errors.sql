-- 0026_agent_errors: an agent's latest failed attempts, found by index.
--
-- The dashboard's agent page listed "latest errors" from agent_task.error, which a later successful attempt of
-- the same task clears: an agent that failed and then recovered showed no error at all. Its errors are the
-- attempts that did not succeed (task_attempt keeps every one until retention drops its partition), read newest
-- first per agent (dashboard_agent_errors). Partial: only failed attempts are indexed, so the push path's
-- successful attempts add no index entry. Created on the partitioned table, it is made on every partition,
-- and on each partition made later.
CREATE INDEX task_attempt_agent_failed_idx ON task_attempt (agent_id, id)
    WHERE outcome NOT IN ('succeeded', 'accepted', 'cancelled');
