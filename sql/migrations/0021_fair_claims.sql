-- 0021_fair_claims: fair share past the delivery claim.
--
-- agent_task.autopilot_id: the autopilot of the task's run, copied when the task is made (the take,
-- task_insert_for_run), so a claim can take an agent's queued tasks round-robin across the autopilots that
-- feed it (hookgate_task_claim) by index, without joining the runs. No foreign key: a denormalised copy of
-- autopilot_run.autopilot_id (which has one). Filled here for the tasks that can still be claimed or are
-- running; finished ones keep NULL (nothing reads it there).
ALTER TABLE agent_task ADD COLUMN autopilot_id uuid;
UPDATE agent_task t SET autopilot_id = r.autopilot_id
FROM autopilot_run r
WHERE r.id = t.run_id AND t.status IN ('queued', 'running') AND t.autopilot_id IS NULL;
-- An agent's queued tasks by feed, oldest first within each (id breaks ties of one batch's equal times): the
-- claim's loose index scan over the feeds and its heads.
CREATE INDEX agent_task_fair_idx ON agent_task (agent_id, autopilot_id, available_at, id) WHERE status = 'queued';

-- agent_slot: whom a slot served last and when, written by the claim that gives it a lease token anyway; the
-- claim serves the least recently served autopilot first, and the push worker the least recently served agent.
ALTER TABLE agent_slot ADD COLUMN autopilot_id uuid, ADD COLUMN served_at timestamptz;

-- hookgate_delivery_take caps the tasks born claimed per agent by the pusher's fair share: its arguments for
-- that (p_room_agents, p_rooms, p_room_other) are in the signature 0020_fair_deliveries created, released
-- together with this migration; its body is in sql/functions/hookgate_delivery_take.sql.
