-- 0030_workspace_rooms: the take caps the tasks it gives a push slot per workspace too, not only per agent. A
-- worker process leaves the last eighth of its push slots to other workspaces; with rooms per agent alone, each
-- agent the pusher had not seen yet got the room of a workspace of its own, so a workspace with several new
-- agents (or whose known agents' rounded shares added up past its part) could take every slot. The take reads
-- each task's workspace before it gives the task a slot, and the agents of one workspace share its room.
--
-- hookgate_delivery_take(..., p_room_other, p_room_spaces, p_space_rooms, p_space_other, p_cap): at most
-- p_space_rooms[i] tasks born claimed of workspace p_room_spaces[i], p_space_other of any other workspace (NULL:
-- p_claims). Its body is its file in sql/functions/, which `hookgate migrate` applies right after the
-- migrations, in the same run: the function is created here with a placeholder body.
DROP FUNCTION hookgate_delivery_take(integer, double precision, uuid, integer, timestamptz, integer,
                                     double precision, text, integer, double precision, double precision, jsonb,
                                     uuid[], integer[], integer, integer);

CREATE FUNCTION hookgate_delivery_take(
    p_limit integer, p_lease_s double precision, p_cursor uuid, p_fanout integer, p_at timestamptz,
    p_max_attempts integer, p_heartbeat_s double precision, p_holder text, p_claims integer,
    p_lease_cap_s double precision, p_lease_margin_s double precision, p_trigger_cursors jsonb,
    p_room_agents uuid[], p_rooms integer[], p_room_other integer, p_room_spaces uuid[], p_space_rooms integer[],
    p_space_other integer, p_cap integer)
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
