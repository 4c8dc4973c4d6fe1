-- 0003_dispatch: what the delivery worker, the push worker and the pull runtime API need beyond 0001.

-- Round-robin claims walk the queued deliveries trigger by trigger (ARCHITECTURE §5 fairness), so the queue
-- also needs an index by trigger.
CREATE INDEX webhook_delivery_trigger_queue_idx ON webhook_delivery (trigger_id, available_at)
    WHERE status = 'queued';

-- The push worker looks for due queued tasks of any agent; the pending-run repair looks for old pending runs.
CREATE INDEX agent_task_due_idx ON agent_task (available_at) WHERE status = 'queued';
CREATE INDEX autopilot_run_pending_idx ON autopilot_run (updated_at) WHERE status = 'pending';

-- The token of the holder's last release (report, push result, retry). A holder repeating the same
-- report is answered 200 (idempotent), while any other token stays a late result (409).
ALTER TABLE agent_task ADD COLUMN released_token uuid;

-- Per-trigger pacing (ARCHITECTURE §5): a fixed one-minute window per trigger. Over budget, a delivery is
-- released to the window's end without spending a dispatch attempt.
CREATE TABLE trigger_pace (
    trigger_id    uuid PRIMARY KEY REFERENCES autopilot_trigger(id),
    window_start  timestamptz NOT NULL,
    used          integer NOT NULL CHECK (used >= 0)
);

-- Take up to p_wanted dispatch slots from a trigger's current window; returns how many were granted and
-- when the window ends. One short statement per claimed batch and trigger, so the row is hot only briefly.
CREATE FUNCTION hookgate_pace_take(p_trigger uuid, p_wanted integer, p_per_minute integer, p_at timestamptz)
RETURNS TABLE (granted integer, window_end timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    w_start timestamptz;
    w_used  integer;
BEGIN
    INSERT INTO trigger_pace AS p (trigger_id, window_start, used) VALUES (p_trigger, p_at, 0)
    ON CONFLICT (trigger_id) DO UPDATE
        SET window_start = CASE WHEN p.window_start <= p_at - interval '1 minute' OR p.window_start > p_at
                                THEN p_at ELSE p.window_start END,
            used = CASE WHEN p.window_start <= p_at - interval '1 minute' OR p.window_start > p_at
                        THEN 0 ELSE p.used END
    RETURNING p.window_start, p.used INTO w_start, w_used;
    granted := greatest(0, least(p_wanted, p_per_minute - w_used));
    UPDATE trigger_pace SET used = used + granted WHERE trigger_id = p_trigger;
    window_end := w_start + interval '1 minute';
    RETURN NEXT;
END
$$;

-- Per-agent concurrency slots (ARCHITECTURE §7). A running task holds one slot: the slot row stores the lease
-- token it was claimed with, so the slot is free again as soon as that lease ends (report, retry, expiry,
-- cancel) without any write on release. Claimers lock different slots (SKIP LOCKED), so claims for one
-- agent run in parallel while the cap stays strict.
CREATE TABLE agent_slot (
    agent_id     uuid NOT NULL REFERENCES agent(id),
    slot         integer NOT NULL CHECK (slot >= 0),
    lease_token  uuid,
    PRIMARY KEY (agent_id, slot)
);
-- A slot is busy while a running task carries its token: one index probe per slot checked.
CREATE INDEX agent_task_running_token_idx ON agent_task (lease_token) WHERE status = 'running';

-- Claim up to p_limit due queued tasks of one agent (or only p_task) within its concurrency cap. In READ
-- COMMITTED every statement of this volatile function takes a fresh snapshot, so the re-check after a slot
-- is locked sees every claim committed before: two claimers can never fill one slot.
CREATE FUNCTION hookgate_task_claim(p_agent uuid, p_task uuid, p_limit integer, p_lease_s double precision,
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
        -- Fresh snapshot: is the slot still free now that we hold it?
        CONTINUE WHEN EXISTS (SELECT 1 FROM agent_slot sl JOIN agent_task r ON r.lease_token = sl.lease_token
                              WHERE sl.agent_id = p_agent AND sl.slot = s AND r.status = 'running');
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
