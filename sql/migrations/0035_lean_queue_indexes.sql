-- 0035_lean_queue_indexes: fewer index entries written per webhook. Four indexes that no query needs any more,
-- each an entry written for every row, and the dedupe keys' index by delivery as a BRIN.
-- webhook_delivery_trigger_queue_idx (trigger_id, available_at) of queued deliveries: the take's walk over a
-- trigger's queue now names the trigger's workspace too and reads webhook_delivery_fair_idx (workspace_id,
-- trigger_id, available_at, id), which gives the same order. webhook_delivery_queue_idx (available_at,
-- received_at) of queued deliveries: the queue-depth metric reads webhook_delivery_queued_idx instead, and
-- the oldest queued delivery by id (UUIDv7, made at receipt). Both were written for every accepted webhook.
-- task_attempt_finished_idx: attempts expire with their partition, never by finish time, and nothing reads
-- them in that order. agent_task_due_idx: every read of queued tasks names its agent
-- (agent_task_queue_idx, agent_task_fair_idx).
DROP INDEX webhook_delivery_trigger_queue_idx;
DROP INDEX webhook_delivery_queue_idx;
DROP INDEX task_attempt_finished_idx;
DROP INDEX agent_task_due_idx;
-- webhook_delivery_dedupe_delivery_idx: read only when a delivery partition is dropped (partition_dedupe_release
-- deletes the keys of its id range), once a day, yet written for every accepted webhook. Keys are inserted in
-- about the order of their deliveries' ids (UUIDv7), so a BRIN of the id answers that range delete from a few
-- block ranges and costs nearly nothing to keep (a new row only widens the summary of its range, if that range
-- was summarized at all).
DROP INDEX webhook_delivery_dedupe_delivery_idx;
CREATE INDEX webhook_delivery_dedupe_delivery_brin ON webhook_delivery_dedupe USING brin (delivery_id);
