"""Signed webhook requests as four providers send them (github, stripe, standard, slack), for the chaos load."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass

PRESETS = ("github", "stripe", "standard", "slack")
# The standard preset base64-decodes what follows whsec_; the others use the secret as given.
SECRETS = {
    "github": "gh-chaos-secret",
    "stripe": "whsec_stripe_chaos_secret",
    "standard": "whsec_" + base64.b64encode(b"standard-chaos-secret-32-bytes!!").decode(),
    "slack": "slack-chaos-secret",
}


@dataclass(frozen=True)
class Event:
    """One provider event: its dedupe key and raw body. Retries resend the same event, freshly signed."""

    preset: str
    key: str
    raw: bytes


def new_event(preset: str, seq: int) -> Event:
    """A new event of ``preset`` with a unique dedupe key."""
    key = f"{preset}-{seq}-{uuid.uuid4().hex[:12]}"
    body: dict[str, object] = {"seq": seq, "sent_at": time.time()}
    if preset == "github":
        body["action"] = "opened"
    elif preset == "stripe":
        body.update(id=key, type="invoice.paid")
    elif preset == "standard":
        body["type"] = "order.created"
    else:
        body.update(event_id=key, type="event_callback", event={"type": "app_mention"})
    return Event(preset, key, json.dumps(body).encode())


def sign(event: Event, *, forged: bool = False) -> dict[str, str]:
    """The headers a provider sends for ``event`` now; ``forged`` signs with a wrong secret."""
    secret = SECRETS[event.preset]
    now = int(time.time())
    headers = {"content-type": "application/json"}
    if event.preset == "github":
        mac = hmac.new(secret.encode(), event.raw, hashlib.sha256).hexdigest()
        headers.update({"x-github-event": "issues", "x-github-delivery": event.key,
                        "x-hub-signature-256": f"sha256={mac}"})
    elif event.preset == "stripe":
        mac = hmac.new(secret.encode(), f"{now}.".encode() + event.raw, hashlib.sha256).hexdigest()
        headers["stripe-signature"] = f"t={now},v1={mac}"
    elif event.preset == "standard":
        key = base64.b64decode(secret.removeprefix("whsec_") + "==")
        mac64 = base64.b64encode(hmac.new(key, f"{event.key}.{now}.".encode() + event.raw,
                                          hashlib.sha256).digest()).decode()
        headers.update({"webhook-id": event.key, "webhook-timestamp": str(now), "webhook-signature": f"v1,{mac64}"})
    else:
        mac = hmac.new(secret.encode(), f"v0:{now}:".encode() + event.raw, hashlib.sha256).hexdigest()
        headers.update({"x-slack-request-timestamp": str(now), "x-slack-signature": f"v0={mac}"})
    return _forge(headers) if forged else headers


_SIGNATURE = {"github": "x-hub-signature-256", "stripe": "stripe-signature", "standard": "webhook-signature",
              "slack": "x-slack-signature"}


def _forge(headers: dict[str, str]) -> dict[str, str]:
    """Change the signature's last character, as a forger guessing it would."""
    for name in _SIGNATURE.values():
        if name in headers:
            value = headers[name]
            i = len(value) - 6  # well inside the digest, whatever its encoding
            headers[name] = value[:i] + ("0" if value[i] != "0" else "1") + value[i + 1 :]
    return headers
