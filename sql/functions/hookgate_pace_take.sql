-- hookgate_pace_take: one per-trigger pacing grant (since 0003_dispatch).
-- Take up to p_wanted dispatch slots from a trigger's current window; returns how many were granted and
-- when the window ends. One row lock and one write per claimed batch and trigger.
-- The window is fixed and one minute long (trigger_pace); over budget, the caller releases the delivery to
-- the window's end without spending a dispatch attempt.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_pace_take(p_trigger uuid, p_wanted integer, p_per_minute integer, p_at timestamptz)
RETURNS TABLE (granted integer, window_end timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    w_start timestamptz;
    w_used  integer;
BEGIN
    -- One new row version per take (the row is locked, then written once): an upsert followed by the grant's
    -- update wrote two, on the one row every take of the trigger waits for.
    SELECT p.window_start, p.used INTO w_start, w_used FROM trigger_pace p WHERE p.trigger_id = p_trigger FOR UPDATE;
    IF NOT FOUND THEN
        -- The trigger's first take: make its row (a concurrent first take may make it first), then lock it.
        INSERT INTO trigger_pace (trigger_id, window_start, used) VALUES (p_trigger, p_at, 0)
        ON CONFLICT (trigger_id) DO NOTHING;
        SELECT p.window_start, p.used INTO w_start, w_used FROM trigger_pace p WHERE p.trigger_id = p_trigger FOR UPDATE;
    END IF;
    IF w_start <= p_at - interval '1 minute' OR w_start > p_at THEN
        w_start := p_at;
        w_used := 0;
    END IF;
    granted := greatest(0, least(p_wanted, p_per_minute - w_used));
    UPDATE trigger_pace SET window_start = w_start, used = w_used + granted WHERE trigger_id = p_trigger;
    window_end := w_start + interval '1 minute';
    RETURN NEXT;
END
$$;
