-- 0033_take_named: the take can be given the deliveries to take by id. Ingress announces the ids it just
-- stored; while nothing waits behind them, a worker takes exactly those by key instead of walking the queue's
-- indexes, whose probes step over every entry that left the queue since the table was last vacuumed (~0.75 ms
-- a probe after 20,000 dispatched deliveries, a dozen probes a take: most of a webhook's way to its agent).
--
-- hookgate_delivery_take(..., p_cap, p_ids): p_ids NULL walks the queue as before. Its body is its file in
-- sql/functions/, which `hookgate migrate` applies right after the migrations, in the same run: the function
-- is created here with a placeholder body.
DROP FUNCTION hookgate_delivery_take(integer, double precision, uuid, integer, timestamptz, integer,
                                     double precision, text, integer, double precision, double precision, jsonb,
                                     uuid[], integer[], integer, uuid[], integer[], integer, integer);

CREATE FUNCTION hookgate_delivery_take(
    p_limit integer, p_lease_s double precision, p_cursor uuid, p_fanout integer, p_at timestamptz,
    p_max_attempts integer, p_heartbeat_s double precision, p_holder text, p_claims integer,
    p_lease_cap_s double precision, p_lease_margin_s double precision, p_trigger_cursors jsonb,
    p_room_agents uuid[], p_rooms integer[], p_room_other integer, p_room_spaces uuid[], p_space_rooms integer[],
    p_space_other integer, p_cap integer, p_ids uuid[])
RETURNS TABLE (kind text, id uuid, lease_token uuid, workspace_id uuid, trigger_id uuid, autopilot_id uuid,
               event text, envelope jsonb, run_id uuid, dispatch_attempts integer, received_at timestamptz,
               rate_limit_per_minute integer, claimed boolean, task_id uuid, agent_id uuid, payload jsonb,
               attempt integer, max_attempts integer, task_lease_token uuid, lease_expires_at timestamptz,
               endpoint_url text, timeout_s double precision, signing_secret_ct bytea, autopilot_title text,
               autopilot_instructions text, previous_secret_ct bytea)
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'hookgate_delivery_take is defined by sql/functions/hookgate_delivery_take.sql';
END
$$;
