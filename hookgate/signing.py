"""Webhook signatures as each provider makes them: the primitives the gateway verifies with, and the signers.

The provider presets (``gateway/providers.py``) check signatures with :func:`mac`, :func:`standard_key` and
:func:`twilio_params`; :func:`sign` uses the same ones to sign as the provider does, for ``hookgate send``.
``tests/gateway/test_providers.py`` holds both to the providers' own SDKs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from hookgate.preset_data import PRESET_DATA


def utf8(text: str) -> bytes:
    """``text`` as UTF-8 bytes; a lone surrogate (which JSON allows) is kept, not an error."""
    return text.encode("utf-8", "surrogatepass")


def mac(key: str | bytes, message: bytes) -> bytes:
    """HMAC-SHA256 of ``message`` under ``key`` (a string is keyed by its UTF-8 bytes)."""
    return hmac.digest(utf8(key) if isinstance(key, str) else key, message, "sha256")


def standard_key(secret: str) -> bytes:
    """The Standard Webhooks HMAC key as the reference library derives it: base64 of what follows ``whsec_``.

    A secret that does not decode (or decodes to nothing) is used as its raw UTF-8 bytes.
    """
    try:
        key = base64.b64decode(secret.removeprefix("whsec_") + "==")
    except ValueError:
        key = b""
    return key or utf8(secret)


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """A Standard Webhooks ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``."""
    return "v1," + base64.b64encode(mac(standard_key(secret), utf8(f"{msg_id}.{timestamp}.") + body)).decode()


def twilio_params(fields: list[tuple[str, str]]) -> str:
    """What Twilio appends to the URL it signs: names sorted, each with its distinct values sorted (its helpers)."""
    values: dict[str, set[str]] = {}
    for name, value in fields:
        values.setdefault(name, set()).add(value)
    return "".join(name + value for name in sorted(values) for value in sorted(values[name]))


@dataclass(frozen=True)
class Outgoing:
    """A webhook about to be sent: its exact body, the URL it goes to, when, and the id of the message."""

    raw: bytes
    url: str
    now: int
    """Unix seconds, as the timestamped schemes write it."""
    message_id: str


Signer = Callable[[Outgoing, str], dict[str, str]]
"""The signature headers a provider adds to a request, given its signing secret."""


def _hub(out: Outgoing, secret: str) -> dict[str, str]:
    return {"X-Hub-Signature-256": "sha256=" + mac(secret, out.raw).hex()}


def _gitlab(out: Outgoing, secret: str) -> dict[str, str]:
    return {"X-Gitlab-Token": secret}  # a shared password, not a MAC


def _stripe(out: Outgoing, secret: str) -> dict[str, str]:
    return {"Stripe-Signature": f"t={out.now},v1=" + mac(secret, utf8(f"{out.now}.") + out.raw).hex()}


def _slack(out: Outgoing, secret: str) -> dict[str, str]:
    return {"X-Slack-Request-Timestamp": str(out.now),
            "X-Slack-Signature": "v0=" + mac(secret, utf8(f"v0:{out.now}:") + out.raw).hex()}


def _shopify(out: Outgoing, secret: str) -> dict[str, str]:
    return {"X-Shopify-Hmac-Sha256": base64.b64encode(mac(secret, out.raw)).decode()}


def _standard(out: Outgoing, secret: str) -> dict[str, str]:
    return {"webhook-id": out.message_id, "webhook-timestamp": str(out.now),
            "webhook-signature": standard_signature(secret, out.message_id, out.now, out.raw)}


def _linear(out: Outgoing, secret: str) -> dict[str, str]:
    return {"Linear-Signature": mac(secret, out.raw).hex()}  # its timestamp travels in the body


def _twilio(out: Outgoing, secret: str) -> dict[str, str]:
    """A form body (what Twilio sends): HMAC-SHA1 of the URL followed by the sorted parameters."""
    fields = parse_qsl(out.raw.decode(), keep_blank_values=True)
    signed = hmac.digest(utf8(secret), utf8(out.url + twilio_params(fields)), hashlib.sha1)
    return {"X-Twilio-Signature": base64.b64encode(signed).decode()}


SIGNERS: dict[str, Signer] = {
    "generic": _hub, "github": _hub, "gitlab": _gitlab, "stripe": _stripe, "slack": _slack, "shopify": _shopify,
    "standard": _standard, "linear": _linear, "twilio": _twilio,
}
"""How the sender of each provider preset signs (twilio: a form-encoded body)."""


_PLACEHOLDER = re.compile(r"\{(body|timestamp|url)\}")


def sign_hmac(scheme: Mapping[str, Any], out: Outgoing, secret: str) -> dict[str, str]:
    """The headers a sender following an `hmac` scheme given as data adds (`{body}`, `{timestamp}`, `{url}`)."""
    stamp = str(out.now * 1000 if scheme.get("timestamp_unit") == "ms" else out.now)
    values = {"body": out.raw, "timestamp": utf8(stamp), "url": utf8(out.url)}
    pieces = _PLACEHOLDER.split(scheme.get("signed", "{body}"))  # literal, name, literal, name, …, literal
    message = b"".join(values[piece] if i % 2 else utf8(piece) for i, piece in enumerate(pieces))
    digest = hmac.digest(utf8(secret), message, scheme.get("algorithm", "sha256"))
    text = digest.hex() if scheme.get("encoding", "hex") == "hex" else base64.b64encode(digest).decode()
    value = scheme.get("prefix", "") + text
    if (part := scheme.get("signature_part")) is not None:
        stamped = f"{scheme['timestamp_part']}={stamp};" if scheme.get("timestamp_part") else ""
        value = f"{stamped}{part}={value}"
    headers = {scheme["header"]: value}
    if (name := scheme.get("timestamp_header")) is not None:
        headers[name] = stamp
    return headers


def sign(provider: str, out: Outgoing, secret: str) -> dict[str, str]:
    """The signature headers ``provider`` would send with ``out``, signed with ``secret``.

    A data preset whose sender signs with its private key (Discord, SendGrid) cannot be signed here: {}.
    """
    if provider in SIGNERS:
        return SIGNERS[provider](out, secret)
    scheme = PRESET_DATA[provider]["signature"]
    return sign_hmac(scheme, out, secret) if scheme["kind"] == "hmac" else {}
