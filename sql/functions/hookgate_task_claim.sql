-- hookgate_task_claim: the one-by-one task claim of pull runtimes and the push worker (since 0003_dispatch).
-- Claim up to p_limit due queued tasks of one agent (or only p_task) within its concurrency cap. In READ
-- COMMITTED every statement of this volatile function takes a fresh snapshot, so the re-check after a slot
-- is locked sees every claim committed before: two claimers can never fill one slot.
-- A running task holds one agent_slot row, stamped with its lease token: the slot is free again as soon as
-- that lease ends (report, retry, expiry, cancel) without any write on release. A lowered cap stays strict
-- (since 0014_agent_update): the cap is read again once the slot is held, and a task still running on a slot
-- the lower cap retired takes the free slot over (hookgate_slots_settle).
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_task_claim(p_agent uuid, p_task uuid, p_limit integer, p_lease_s double precision,
                                               p_holder text, p_at timestamptz)
RETURNS SETOF agent_task
LANGUAGE plpgsql AS $$
DECLARE
    cap    integer;
    s      integer;
    t      uuid;
    tok    uuid;
    tried  integer[] := '{}';
    n      integer := 0;
    off    integer;
BEGIN
    SELECT max_concurrency INTO cap FROM agent WHERE id = p_agent AND archived_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM agent_slot WHERE agent_id = p_agent AND slot = cap - 1) THEN
        INSERT INTO agent_slot (agent_id, slot) SELECT p_agent, g FROM generate_series(0, cap - 1) g
        ON CONFLICT DO NOTHING;
    END IF;
    -- Start the slot scan at a random slot, so concurrent claimers rarely probe the same busy slots.
    off := floor(random() * cap)::integer;
    WHILE n < p_limit LOOP
        SELECT sl.slot INTO s FROM agent_slot sl
        WHERE sl.agent_id = p_agent AND sl.slot >= off AND sl.slot < cap AND sl.slot <> ALL (tried)
          AND NOT EXISTS (SELECT 1 FROM agent_task r WHERE r.status = 'running' AND r.lease_token = sl.lease_token)
        ORDER BY sl.slot
        LIMIT 1
        FOR UPDATE OF sl SKIP LOCKED;
        IF NOT FOUND THEN
            SELECT sl.slot INTO s FROM agent_slot sl
            WHERE sl.agent_id = p_agent AND sl.slot < off AND sl.slot <> ALL (tried)
              AND NOT EXISTS (SELECT 1 FROM agent_task r WHERE r.status = 'running'
                                AND r.lease_token = sl.lease_token)
            ORDER BY sl.slot
            LIMIT 1
            FOR UPDATE OF sl SKIP LOCKED;
        END IF;
        EXIT WHEN NOT FOUND;
        tried := tried || s;
        -- Fresh snapshot: is the slot still free now that we hold it, and still under the cap (a lower one
        -- may have been set since it was read)?
        SELECT max_concurrency INTO cap FROM agent WHERE id = p_agent;
        CONTINUE WHEN s >= cap
            OR EXISTS (SELECT 1 FROM agent_slot sl JOIN agent_task r ON r.lease_token = sl.lease_token
                       WHERE sl.agent_id = p_agent AND sl.slot = s AND r.status = 'running');
        -- A task still running over a lowered cap takes the free slot instead of a new claim.
        CONTINUE WHEN cardinality(hookgate_slots_settle(p_agent, cap, ARRAY[s])) = 0;
        IF p_task IS NULL THEN
            SELECT id INTO t FROM agent_task
            WHERE agent_id = p_agent AND status = 'queued' AND available_at <= p_at
            ORDER BY available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED;
        ELSE
            SELECT id INTO t FROM agent_task
            WHERE id = p_task AND agent_id = p_agent AND status = 'queued' AND available_at <= p_at
            FOR UPDATE SKIP LOCKED;
        END IF;
        EXIT WHEN NOT FOUND;
        tok := gen_random_uuid();
        UPDATE agent_slot SET lease_token = tok WHERE agent_id = p_agent AND slot = s;
        RETURN QUERY
        UPDATE agent_task
        SET status = 'running', attempt = attempt + 1, lease_token = tok,
            lease_expires_at = p_at + make_interval(secs => p_lease_s), holder_instance = p_holder,
            started_at = coalesce(started_at, now()), updated_at = now()
        WHERE id = t
        RETURNING *;
        n := n + 1;
    END LOOP;
END
$$;
