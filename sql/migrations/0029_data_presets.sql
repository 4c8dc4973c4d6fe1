-- 0029_data_presets: seven presets that are configurations of a signature scheme and sources
-- (hookgate/preset_data.py) join the providers a trigger may name.
ALTER TABLE autopilot_trigger DROP CONSTRAINT autopilot_trigger_provider_check;
ALTER TABLE autopilot_trigger ADD CONSTRAINT autopilot_trigger_provider_check
    CHECK (provider IN ('generic', 'github', 'gitlab', 'stripe', 'slack', 'shopify', 'standard', 'linear', 'twilio',
                        'meta', 'zoom', 'dropbox', 'paddle', 'intercom', 'discord', 'sendgrid', 'custom'));
