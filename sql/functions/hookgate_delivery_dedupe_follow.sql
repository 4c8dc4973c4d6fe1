-- hookgate_delivery_dedupe_follow: a delivery's dedupe key follows its status (since 0024_partitions).
-- AFTER UPDATE OF status on webhook_delivery, when the row moves into or out of rejected/failed (the trigger's
-- WHEN): a delivery that turns rejected or failed no longer holds its key, so the provider's retry is a new
-- delivery; one that leaves those states claims it again, refused (unique_violation) when another holds it,
-- as the old unique index refused it.
--
-- Live definition: `hookgate migrate` re-applies this file (CREATE OR REPLACE) whenever it changes. A change of
-- the arguments or of the result type cannot be replaced in place: it needs a migration that drops the old
-- signature (see sql/README.md).

CREATE OR REPLACE FUNCTION hookgate_delivery_dedupe_follow() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('rejected', 'failed') THEN
        DELETE FROM webhook_delivery_dedupe
        WHERE trigger_id = OLD.trigger_id AND dedupe_key = OLD.dedupe_key AND delivery_id = OLD.id;
    ELSE
        INSERT INTO webhook_delivery_dedupe (trigger_id, dedupe_key, delivery_id)
        VALUES (NEW.trigger_id, NEW.dedupe_key, NEW.id);
    END IF;
    RETURN NULL;
END
$$;
