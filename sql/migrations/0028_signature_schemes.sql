-- 0028_signature_schemes: a webhook trigger may check its sender by a scheme given as data, and name its own
-- dedupe and event sources.
--
-- `signature_scheme` holds one validated JSON object (gateway/schemes.py: hmac, public_key, shared_secret or
-- basic_auth): on a `custom` trigger it is the only check; on a preset it replaces the preset's check while
-- the preset still names events and dedupe keys. Null keeps the preset's own. What it checks against stays
-- in signing_secret_ct (a secret, or for public_key the sender's public key), encrypted like any secret.
ALTER TABLE autopilot_trigger DROP CONSTRAINT autopilot_trigger_provider_check;
ALTER TABLE autopilot_trigger ADD CONSTRAINT autopilot_trigger_provider_check
    CHECK (provider IN ('generic', 'github', 'gitlab', 'stripe', 'slack', 'shopify', 'standard', 'linear', 'twilio',
                        'custom'));
ALTER TABLE autopilot_trigger ADD COLUMN signature_scheme jsonb
    CHECK (signature_scheme IS NULL OR jsonb_typeof(signature_scheme) = 'object');
-- A custom trigger has nothing to fall back on.
ALTER TABLE autopilot_trigger ADD CONSTRAINT autopilot_trigger_custom_has_scheme
    CHECK (provider IS DISTINCT FROM 'custom' OR signature_scheme IS NOT NULL);

-- Where a trigger reads its dedupe key and its event name, when not from its preset (gateway/providers.py,
-- source_value): `header:NAME`, `json:/pointer`, `form:FIELD` or `query:NAME`. Null keeps the preset's.
ALTER TABLE autopilot_trigger ADD COLUMN dedupe_key_source text
    CHECK (dedupe_key_source ~ '^(header|json|form|query):.+$' AND length(dedupe_key_source) <= 300);
ALTER TABLE autopilot_trigger ADD COLUMN event_source text
    CHECK (event_source ~ '^(header|json|form|query):.+$' AND length(event_source) <= 300);
