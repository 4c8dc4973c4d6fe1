-- 0002_dispatch (assigned 0003; numbered 0002 while no other migration exists, since the migrator refuses gaps):
-- what the delivery worker, the push worker and the pull runtime API need beyond 0001.

-- Round-robin claims walk the queued deliveries trigger by trigger (DESIGN §5 fairness), so the queue
-- also needs an index by trigger.
CREATE INDEX webhook_delivery_trigger_queue_idx ON webhook_delivery (trigger_id, available_at)
    WHERE status = 'queued';

-- The push worker looks for due queued tasks of any agent; the pending-run repair looks for old pending runs.
CREATE INDEX agent_task_due_idx ON agent_task (available_at) WHERE status = 'queued';
CREATE INDEX autopilot_run_pending_idx ON autopilot_run (updated_at) WHERE status = 'pending';

-- The token of the holder's last release (report, push result, retry). A holder repeating the same
-- report is answered 200 (idempotent), while any other token stays a late result (409).
ALTER TABLE agent_task ADD COLUMN released_token uuid;

-- Per-trigger pacing (DESIGN §5): a fixed one-minute window per trigger. Over budget, a delivery is
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

-- Claim queued tasks of one agent (optionally one given task) within its concurrency cap (DESIGN §7 P3).
-- The agent row is locked first so concurrent claimers count running tasks one after the other: the cap
-- is strict across any number of processes. In READ COMMITTED each statement of this (volatile) function
-- takes a fresh snapshot, so the count after the lock sees every claim committed before it.
-- FOR NO KEY UPDATE does not block task inserts (their foreign-key check takes KEY SHARE).
CREATE FUNCTION hookgate_task_claim(p_agent uuid, p_task uuid, p_limit integer, p_lease_s double precision,
                                    p_holder text, p_at timestamptz)
RETURNS SETOF agent_task
LANGUAGE plpgsql AS $$
DECLARE
    free integer;
BEGIN
    PERFORM 1 FROM agent WHERE id = p_agent AND archived_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT a.max_concurrency - (SELECT count(*) FROM agent_task t WHERE t.agent_id = p_agent AND t.status = 'running')
      INTO free FROM agent a WHERE a.id = p_agent;
    IF free <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH picked AS (
        SELECT id FROM agent_task
        WHERE agent_id = p_agent AND status = 'queued' AND available_at <= p_at
          AND (p_task IS NULL OR id = p_task)
        ORDER BY available_at, id
        LIMIT least(free, p_limit)
        FOR UPDATE SKIP LOCKED
    )
    UPDATE agent_task t
    SET status = 'running', attempt = t.attempt + 1, lease_token = gen_random_uuid(),
        lease_expires_at = p_at + make_interval(secs => p_lease_s), holder_instance = p_holder,
        started_at = coalesce(t.started_at, now()), updated_at = now()
    FROM picked WHERE t.id = picked.id
    RETURNING t.*;
END
$$;
