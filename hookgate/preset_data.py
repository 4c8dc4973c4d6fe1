"""Provider presets that are pure configuration: the same fields a `custom` trigger takes, with no code each.

Each entry is what a user would write on a custom trigger to receive that provider (its signature scheme,
where its event name and dedupe key are): the gateway builds the preset from it (gateway/schemes.py,
``data_preset``) and ``hookgate send`` signs its samples from it. The nine older presets (gateway/providers.py)
are code, and their tests prove each of them expressible as such an entry too.

- ``meta``: Meta (WhatsApp Business, Messenger, Instagram): `X-Hub-Signature-256: sha256=<hex HMAC of the
  body>` keyed by the app secret; the event is the body's `object` (``whatsapp_business_account``, ``page``…).
  Meta sends no delivery id, so nothing is deduplicated unless the trigger names a source.
- ``zoom``: `x-zm-signature: v0=<hex HMAC of "v0:{timestamp}:{body}">` with `x-zm-request-timestamp`, keyed by
  the app's secret token; the event is the body's `event` (``meeting.started``).
- ``dropbox``: `X-Dropbox-Signature: <hex HMAC of the body>` keyed by the app secret. A notification only says
  "something changed" for some accounts: it has no event name or id of its own.
- ``paddle``: Paddle Billing's `Paddle-Signature: ts=…;h1=<hex HMAC of "{ts}:{body}">`, keyed by the
  notification destination's secret; several `h1` during a rotation; event `event_type`, dedupe `event_id`.
- ``intercom``: `X-Hub-Signature: sha1=<hex HMAC-SHA1 of the body>` keyed by the app's client secret; event
  `topic`, dedupe the notification's `id`.
- ``discord``: an interaction signed with Ed25519 over timestamp + body (`X-Signature-Ed25519`, hex;
  `X-Signature-Timestamp`), checked with the application's public key (hex, as the developer portal shows it);
  event the command's name (`data.name`), dedupe the interaction's `id`.
- ``sendgrid``: the Event Webhook's ECDSA P-256/SHA-256 signature over timestamp + body
  (`X-Twilio-Email-Event-Webhook-Signature`, base64 DER; `…-Timestamp`), checked with the verification key
  as SendGrid shows it (base64 DER); the body is an array of events: event and dedupe key from the first one.

``PRESET_HANDSHAKES`` names the handshake each preset answers unless its trigger sets its own
(gateway/handshakes.py): Meta's GET (once the trigger has a verify token), Zoom's URL validation, Discord's
PING, Dropbox's `GET ?challenge=`, and Slack's `url_verification` for the code preset `slack`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

PRESET_DATA: MappingProxyType[str, dict[str, Any]] = MappingProxyType({
    "meta": {
        "signature": {"kind": "hmac", "header": "X-Hub-Signature-256", "prefix": "sha256=", "signed": "{body}"},
        "event_source": "json:/object",
    },
    "zoom": {
        "signature": {"kind": "hmac", "header": "x-zm-signature", "prefix": "v0=", "signed": "v0:{timestamp}:{body}",
                      "timestamp_header": "x-zm-request-timestamp"},
        "event_source": "json:/event",
    },
    "dropbox": {
        "signature": {"kind": "hmac", "header": "X-Dropbox-Signature", "signed": "{body}"},
    },
    "paddle": {
        "signature": {"kind": "hmac", "header": "Paddle-Signature", "signature_part": "h1", "timestamp_part": "ts",
                      "signed": "{timestamp}:{body}"},
        "event_source": "json:/event_type",
        "dedupe_key_source": "json:/event_id",
    },
    "intercom": {
        "signature": {"kind": "hmac", "header": "X-Hub-Signature", "algorithm": "sha1", "prefix": "sha1=",
                      "signed": "{body}"},
        "event_source": "json:/topic",
        "dedupe_key_source": "json:/id",
    },
    "discord": {
        "signature": {"kind": "public_key", "algorithm": "ed25519", "header": "X-Signature-Ed25519", "encoding": "hex",
                      "timestamp_header": "X-Signature-Timestamp", "signed": "{timestamp}{body}"},
        "event_source": "json:/data/name",
        "dedupe_key_source": "json:/id",
    },
    "sendgrid": {
        "signature": {"kind": "public_key", "algorithm": "ecdsa_p256_sha256",
                      "header": "X-Twilio-Email-Event-Webhook-Signature", "encoding": "base64",
                      "timestamp_header": "X-Twilio-Email-Event-Webhook-Timestamp", "signed": "{timestamp}{body}"},
        "event_source": "json:/0/event",
        "dedupe_key_source": "json:/0/sg_event_id",
    },
})
"""Every data preset by name: `signature` (a scheme), and where set `event_source` and `dedupe_key_source`."""

PRESET_HANDSHAKES: MappingProxyType[str, dict[str, Any]] = MappingProxyType({
    "meta": {"kind": "meta"},
    "zoom": {"kind": "zoom"},
    "discord": {"kind": "discord_ping"},
    "dropbox": {"kind": "echo_query", "param": "challenge", "content_type": "text/plain"},
    "slack": {"kind": "slack_url_verification"},
})
"""The handshake of each preset that has one, as a trigger's `handshake` field would say it."""
