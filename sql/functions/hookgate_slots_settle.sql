-- hookgate_slots_settle: a lowered concurrency cap made strict (since 0014_agent_update).
-- Of the free slots p_free of agent p_agent (locked by the caller, all under the cap p_cap), give each to a
-- task still running on a slot at or above the cap (retired when the cap was lowered: the task was not cut),
-- and drop that retired slot; return the free slots left, in their order. So a task over a new cap keeps a
-- slot under it until it ends, and no claim starts while as many tasks as the cap still run. Retired slots
-- are locked SKIP LOCKED: one that another caller holds is being moved by it. Without retired busy slots
-- (the usual case) this is one index probe.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_slots_settle(p_agent uuid, p_cap integer, p_free integer[])
RETURNS integer[]
LANGUAGE plpgsql
-- Key plans only, as in hookgate_slots_take: every statement reads rows by an index prefix.
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
-- No JIT, as in hookgate_slots_take.
SET jit = off
AS $$
DECLARE
    moved  integer[];
BEGIN
    IF coalesce(cardinality(p_free), 0) = 0 THEN
        RETURN '{}';
    END IF;
    WITH retired AS (
        SELECT sl.slot, sl.lease_token FROM agent_slot sl
        WHERE sl.agent_id = p_agent AND sl.slot >= p_cap
          AND sl.lease_token IS NOT NULL
          -- By key for each slot, as in hookgate_slots_take (an EXISTS here is a semi-join over every running task).
          AND (SELECT r.id FROM agent_task r WHERE r.lease_token = sl.lease_token AND r.status = 'running'
               LIMIT 1) IS NOT NULL
        ORDER BY sl.slot
        LIMIT cardinality(p_free)
        FOR UPDATE OF sl SKIP LOCKED
    ), pairs AS (
        SELECT r.slot AS old_slot, r.lease_token, f.slot AS new_slot
        FROM (SELECT retired.*, row_number() OVER (ORDER BY retired.slot) AS n FROM retired) r
        JOIN unnest(p_free) WITH ORDINALITY AS f(slot, n) USING (n)
    ), taken AS (
        UPDATE agent_slot sl SET lease_token = p.lease_token
        FROM pairs p WHERE sl.agent_id = p_agent AND sl.slot = p.new_slot
        RETURNING sl.slot
    ), dropped AS (
        DELETE FROM agent_slot sl USING pairs p WHERE sl.agent_id = p_agent AND sl.slot = p.old_slot
    )
    SELECT array_agg(taken.slot) INTO moved FROM taken;
    RETURN coalesce((SELECT array_agg(f.slot ORDER BY f.n) FROM unnest(p_free) WITH ORDINALITY AS f(slot, n)
                     WHERE f.slot <> ALL (coalesce(moved, '{}'))), '{}');
END
$$;
