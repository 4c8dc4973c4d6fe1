-- 0032_payload_filters: a webhook trigger may admit only the deliveries whose body matches a filter.
--
-- `payload_filter` holds one validated JSON object (autopilot/payload_filter.py: tests on JSON pointers,
-- and/or/not); null admits every body. A delivery that does not match is `ignored` with reason code
-- `payload_filter` and, as its reason, the node that decided in words. Validation (operators, depth, node
-- count) is the API's; the database only refuses what is not an object, and a size no valid filter reaches.
ALTER TABLE autopilot_trigger ADD COLUMN payload_filter jsonb
    CHECK (jsonb_typeof(payload_filter) = 'object' AND octet_length(payload_filter::text) <= 65536);
