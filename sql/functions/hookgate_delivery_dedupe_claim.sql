-- hookgate_delivery_dedupe_claim: a new delivery claims its dedupe key, or is not inserted (since 0024_partitions).
-- BEFORE INSERT on webhook_delivery, for a row that holds a key (one with a dedupe key that is neither rejected
-- nor failed: the trigger's WHEN). A unique index on (trigger_id, dedupe_key) cannot exist on a table
-- partitioned by id, so the key lives in webhook_delivery_dedupe; claiming it there with ON CONFLICT DO NOTHING
-- and skipping the row when the key is held is what ON CONFLICT DO NOTHING on the old unique index did,
-- including the wait for a concurrent insert of the same key to commit or roll back. Rows of one statement
-- claim in the order they are inserted, so the first wins.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_delivery_dedupe_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_delivery_dedupe (trigger_id, dedupe_key, delivery_id)
    VALUES (NEW.trigger_id, NEW.dedupe_key, NEW.id)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END
$$;
