-- 0023_agent_cap_argument: HOOKGATE_AGENT_MAX_CONCURRENCY reaches the slot rule as an argument of each claim
-- instead of the session setting hookgate.agent_max_concurrency (since 0021_fair_claims) that every pooled
-- connection carried. Behind a transaction-mode pooler (PgBouncer) a session belongs to no client: the setting
-- could not be sent (PgBouncer refuses unknown startup parameters) and, set, would have held only on whichever
-- server connection happened to run it. One path whatever the pooler: the claims pass the bound down.
--
-- hookgate_slots_take(p_agent, p_want, p_cap), hookgate_task_claim(..., p_at, p_cap) and
-- hookgate_delivery_take(..., p_room_other, p_cap): p_cap bounds every agent's max_concurrency (NULL: no
-- bound). Their bodies are their files in sql/functions/, which `hookgate migrate` applies right after the
-- migrations, in the same run: the functions are created here with placeholder bodies.
DROP FUNCTION hookgate_slots_take(uuid, integer);
DROP FUNCTION hookgate_task_claim(uuid, uuid, integer, double precision, text, timestamptz);
DROP FUNCTION hookgate_delivery_take(integer, double precision, uuid, integer, timestamptz, integer,
                                     double precision, text, integer, double precision, double precision, jsonb,
                                     uuid[], integer[], integer);

CREATE FUNCTION hookgate_slots_take(p_agent uuid, p_want integer, p_cap integer)
RETURNS integer[]
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'hookgate_slots_take is defined by sql/functions/hookgate_slots_take.sql';
END
$$;

CREATE FUNCTION hookgate_task_claim(p_agent uuid, p_task uuid, p_limit integer, p_lease_s double precision,
                                    p_holder text, p_at timestamptz, p_cap integer)
RETURNS SETOF agent_task
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'hookgate_task_claim is defined by sql/functions/hookgate_task_claim.sql';
END
$$;

CREATE FUNCTION hookgate_delivery_take(
    p_limit integer, p_lease_s double precision, p_cursor uuid, p_fanout integer, p_at timestamptz,
    p_max_attempts integer, p_heartbeat_s double precision, p_holder text, p_claims integer,
    p_lease_cap_s double precision, p_lease_margin_s double precision, p_trigger_cursors jsonb,
    p_room_agents uuid[], p_rooms integer[], p_room_other integer, p_cap integer)
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
