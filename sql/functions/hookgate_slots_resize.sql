-- hookgate_slots_resize: the slot rows of an agent after its concurrency cap changed (since 0014_agent_update).
-- Call it in the transaction that changed agent.max_concurrency of p_agent, after that change. It waits for
-- the claims holding a slot of this agent (they commit under the old cap, and are seen here), then makes
-- slots 0 .. cap-1, moves tasks still running on slots at or above the cap onto free slots under it
-- (hookgate_slots_settle), and drops the free slots at or above it. Running tasks are never cut: those
-- that find no free slot keep their retired one, and every later claim gives its slot to them first.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_slots_resize(p_agent uuid)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cap   integer;
    free  integer[];
BEGIN
    -- Claimers lock slots SKIP LOCKED and never wait for one, so waiting here cannot deadlock with them.
    PERFORM 1 FROM agent_slot WHERE agent_id = p_agent ORDER BY slot FOR UPDATE;
    -- Each statement below takes a fresh snapshot (READ COMMITTED, volatile function): it sees every claim
    -- committed before the locks were granted. A slot is free as hookgate_slots_take tests it, by key.
    SELECT max_concurrency INTO cap FROM agent WHERE id = p_agent;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO agent_slot (agent_id, slot) SELECT p_agent, g FROM generate_series(0, cap - 1) g
    ON CONFLICT DO NOTHING;
    SELECT array_agg(sl.slot ORDER BY sl.slot) INTO free FROM agent_slot sl
    WHERE sl.agent_id = p_agent AND sl.slot < cap
      AND (SELECT r.id FROM agent_task r WHERE r.lease_token = sl.lease_token AND r.status = 'running' LIMIT 1) IS NULL;
    PERFORM hookgate_slots_settle(p_agent, cap, free);
    DELETE FROM agent_slot sl
    WHERE sl.agent_id = p_agent AND sl.slot >= cap
      AND (SELECT r.id FROM agent_task r WHERE r.lease_token = sl.lease_token AND r.status = 'running' LIMIT 1) IS NULL;
END
$$;
