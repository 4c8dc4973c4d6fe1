-- 0020_fair_deliveries: fairness across workspaces, for the delivery worker's claim and for ingress.
--
-- The delivery worker's claim visits the workspaces with due deliveries round-robin, then each one's triggers
-- round-robin (sql/functions/hookgate_delivery_take.sql). Both walks are loose index scans of this index:
-- one probe per workspace, one per trigger of a workspace. It holds queued rows only, like the queue indexes.
CREATE INDEX webhook_delivery_fair_idx ON webhook_delivery (workspace_id, trigger_id, available_at)
    WHERE status = 'queued';

-- HOOKGATE_WORKSPACE_MAX_QUEUED: each gateway reads, about once a second, which workspaces have that many
-- runs waiting (not yet running, not finished), a loose index scan of this index that reads at most the limit
-- per workspace.
CREATE INDEX autopilot_run_waiting_idx ON autopilot_run (workspace_id)
    WHERE status IN ('pending', 'issue_created', 'queued');

-- Ingress refuses a correctly signed delivery of a workspace over that limit with 429: it is stored rejected
-- with reason_code 'workspace_queue_full' (a rejected row was only ever a bad signature until now).
ALTER TABLE webhook_delivery DROP CONSTRAINT webhook_delivery_check;
ALTER TABLE webhook_delivery ADD CONSTRAINT webhook_delivery_check
    CHECK (status <> 'rejected' OR signature_status IN ('invalid', 'missing', 'expired')
           OR reason_code = 'workspace_queue_full');

-- The claim takes each workspace's trigger cursor and the pusher's fair shares (new arguments; see 0021).
DROP FUNCTION hookgate_delivery_take(integer, double precision, uuid, integer, timestamptz, integer,
                                     double precision, text, integer, double precision, double precision);
CREATE FUNCTION hookgate_delivery_take(
    p_limit integer, p_lease_s double precision, p_cursor uuid, p_fanout integer, p_at timestamptz,
    p_max_attempts integer, p_heartbeat_s double precision, p_holder text, p_claims integer,
    p_lease_cap_s double precision, p_lease_margin_s double precision, p_trigger_cursors jsonb,
    p_room_agents uuid[], p_rooms integer[], p_room_other integer)
RETURNS TABLE (kind text, id uuid, lease_token uuid, workspace_id uuid, trigger_id uuid, autopilot_id uuid,
               event text, envelope jsonb, run_id uuid, dispatch_attempts integer, received_at timestamptz,
               rate_limit_per_minute integer, claimed boolean, task_id uuid, agent_id uuid, payload jsonb,
               attempt integer, max_attempts integer, task_lease_token uuid, lease_expires_at timestamptz,
               endpoint_url text, timeout_s double precision, signing_secret_ct bytea, autopilot_title text,
               autopilot_instructions text, previous_secret_ct bytea)
LANGUAGE plpgsql AS $$
BEGIN
    -- Its body is sql/functions/hookgate_delivery_take.sql, which `hookgate migrate` applies right after the
    -- migrations, in the same run (this function changes there, as the file says): no copy of it here.
    RAISE EXCEPTION 'hookgate_delivery_take is defined by sql/functions/hookgate_delivery_take.sql';
END
$$;
