-- hookgate_pace_take: one per-trigger pacing grant (since 0003_dispatch).
-- Take up to p_wanted dispatch slots from a trigger's current window; returns how many were granted and
-- when the window ends. One short statement per claimed batch and trigger, so the row is hot only briefly.
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
