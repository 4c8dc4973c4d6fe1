-- 0031_handshakes_replies: a webhook trigger may answer its provider's handshake (gateway/handshakes.py) and
-- answer accepted and duplicate deliveries with a reply of its own (gateway/replies.py).
--
-- `handshake` holds one validated JSON object (`meta`, `echo_query`, `zoom`, `discord_ping`,
-- `slack_url_verification` or `none`); null keeps the preset's own (hookgate/preset_data.py). A Meta verify
-- token is never in that JSON: it is encrypted like a signing secret (verify_token_ct) and only its last four
-- characters are shown again (verify_token_hint).
ALTER TABLE autopilot_trigger ADD COLUMN handshake jsonb
    CHECK (handshake IS NULL OR (jsonb_typeof(handshake) = 'object' AND handshake ? 'kind'
                                 AND NOT handshake ? 'verify_token'));
ALTER TABLE autopilot_trigger ADD COLUMN verify_token_ct bytea;
ALTER TABLE autopilot_trigger ADD COLUMN verify_token_hint text CHECK (length(verify_token_hint) <= 4);

-- `reply`: {status, content_type, body}; a body of at most 4 KiB (the JSON around it is bounded at twice that).
ALTER TABLE autopilot_trigger ADD COLUMN reply jsonb
    CHECK (reply IS NULL OR (jsonb_typeof(reply) = 'object' AND octet_length(reply::text) <= 8192));
