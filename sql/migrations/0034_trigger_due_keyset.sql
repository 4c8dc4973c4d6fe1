-- 0034_trigger_due_keyset: the due index of schedule triggers also orders by id, so that a scheduler's
-- planners resume a herd after the last trigger they read ((next_fire_at, id) > the tick's cursor) instead of
-- walking again, at every batch, over the index entries of the triggers already fired or locked in the same
-- instant. Those entries stay in the index until no transaction can see the old row versions, and in a herd
-- every trigger shares one next_fire_at, so without the id each batch's read grew with the herd.
DROP INDEX autopilot_trigger_due_idx;
CREATE INDEX autopilot_trigger_due_idx ON autopilot_trigger (next_fire_at, id)
    WHERE kind = 'schedule' AND enabled AND deleted_at IS NULL;
