"""``hookgate send``: post a signed sample event of any provider preset to a webhook trigger (like ``stripe trigger``).

The target is a trigger's URL, or its id (then its URL and provider are read with the admin API, ``--url`` and
``--key``). The sample is what that provider sends (its event headers, a fresh delivery id, a body of its
shape; Twilio's is a form), signed with ``--secret`` exactly as the provider signs (:mod:`hookgate.signing`);
without a secret it is sent unsigned, as to a bearer-only trigger. ``--event`` names the event where the
provider carries it; ``--data`` merges fields into the body. The gateway's answer is printed: exit 0 when it
took the event (accepted, duplicate, ignored), 1 when it refused it (``401 invalid_signature``), 2 when it
was never answered.

``--handshake`` sends the trigger's handshake instead (its own, or its preset's: docs/PROVIDERS.md): Meta's GET
with ``--verify-token``, an echoed query parameter, Zoom's URL validation or Slack's ``url_verification`` signed
with ``--secret``, or Discord's PING unsigned (Discord's own probe, which a trigger must refuse with 401).
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx

from hookgate import signing
from hookgate.admin_client import (
    Client,
    Gateway,
    client_settings,
    decoded,
    exit_on_failure,
    fail,
    json_value,
    record,
    resource_id,
)
from hookgate.preset_data import PRESET_DATA, PRESET_HANDSHAKES


@dataclass
class Sample:
    """A provider's sample event before signing: body fields, its own headers, form-encoded or JSON."""

    body: dict[str, Any] | list[dict[str, Any]]
    """An object, or an array of events (SendGrid's)."""
    headers: dict[str, str] = field(default_factory=dict)
    form: bool = False

    def raw(self) -> bytes:
        """The exact bytes sent (and signed)."""
        if self.form and isinstance(self.body, dict):
            return urlencode({k: v if isinstance(v, str) else json.dumps(v) for k, v in self.body.items()}).encode()
        return json.dumps(self.body).encode()


Maker = Callable[[str | None, str, int], Sample]
"""A provider's sample: from the event name asked for (or its default), a fresh id, and now (Unix seconds)."""


def _generic(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"event": event or "sample.event", "id": uid, "data": {"note": "sent by hookgate send"}},
                  {"Idempotency-Key": uid})


def _github(event: str | None, uid: str, now: int) -> Sample:
    body = {"action": "opened", "issue": {"number": 1, "title": "Sample issue", "body": "sent by hookgate send"},
            "repository": {"full_name": "octo/sample"}, "sender": {"login": "hookgate"}}
    return Sample(body, {"X-GitHub-Event": event or "issues", "X-GitHub-Delivery": uid})


def _gitlab(event: str | None, uid: str, now: int) -> Sample:
    body = {"object_kind": "push", "ref": "refs/heads/main", "project": {"path_with_namespace": "group/sample"},
            "commits": []}
    return Sample(body, {"X-Gitlab-Event": event or "Push Hook", "X-Gitlab-Event-UUID": uid})


def _stripe(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"id": f"evt_{uid.replace('-', '')[:24]}", "object": "event", "created": now,
                   "type": event or "payment_intent.succeeded", "livemode": False,
                   "data": {"object": {"id": "pi_sample", "object": "payment_intent", "amount": 2000,
                                       "currency": "usd"}}})


def _slack(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"type": "event_callback", "event_id": f"Ev{uid.replace('-', '')[:12].upper()}", "event_time": now,
                   "team_id": "T0SAMPLE", "event": {"type": event or "app_mention", "text": "sent by hookgate send",
                                                    "user": "U0SAMPLE", "channel": "C0SAMPLE"}})


def _shopify(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"id": 820982911946154508, "email": "sample@example.com", "total_price": "20.00",
                   "currency": "USD"},
                  {"X-Shopify-Topic": event or "orders/create", "X-Shopify-Webhook-Id": uid,
                   "X-Shopify-Shop-Domain": "sample.myshopify.com"})


def _standard(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"type": event or "invoice.paid", "timestamp": now, "data": {"id": "inv_sample", "amount": 2000}})


def _linear(event: str | None, uid: str, now: int) -> Sample:
    kind = event or "Issue"
    return Sample({"action": "create", "type": kind, "webhookTimestamp": now * 1000,
                   "data": {"id": uid, "title": "Sample issue"}},
                  {"Linear-Event": kind, "Linear-Delivery": uid})


def _twilio(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"MessageSid": f"SM{uid.replace('-', '')}", "AccountSid": "AC" + "0" * 32,
                   "MessageStatus": event or "delivered", "From": "+15005550006", "To": "+15005550001"},
                  {"I-Twilio-Idempotency-Token": uid}, form=True)


def _meta(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"object": event or "whatsapp_business_account",
                   "entry": [{"id": "102290129340398", "time": now, "changes": [
                       {"field": "messages", "value": {"messaging_product": "whatsapp",
                                                       "messages": [{"id": f"wamid.{uid}", "type": "text",
                                                                     "text": {"body": "sent by hookgate send"}}]}}]}]})


def _zoom(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"event": event or "meeting.started", "event_ts": now * 1000,
                   "payload": {"account_id": "sample", "object": {"id": uid, "topic": "Sample meeting"}}})


def _dropbox(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"list_folder": {"accounts": ["dbid:sample"]}, "delta": {"users": [12345]}})


def _paddle(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"event_id": f"evt_{uid.replace('-', '')[:26]}", "event_type": event or "transaction.completed",
                   "occurred_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "notification_id":
                   f"ntf_{uid.replace('-', '')[:26]}", "data": {"id": "txn_sample", "status": "completed"}})


def _intercom(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"type": "notification_event", "id": f"notif_{uid}", "topic": event or "conversation.user.created",
                   "created_at": now, "data": {"item": {"type": "conversation", "id": "1"}}})


def _discord(event: str | None, uid: str, now: int) -> Sample:
    return Sample({"type": 2, "id": str(int(uid.replace("-", "")[:15], 16)), "application_id": "1",
                   "data": {"name": event or "sample", "type": 1}})


def _sendgrid(event: str | None, uid: str, now: int) -> Sample:
    return Sample([{"email": "sample@example.com", "timestamp": now, "event": event or "delivered",
                    "sg_event_id": uid.replace("-", ""), "sg_message_id": "sample.filter"}])


SAMPLES: dict[str, Maker] = {
    "generic": _generic, "github": _github, "gitlab": _gitlab, "stripe": _stripe, "slack": _slack,
    "shopify": _shopify, "standard": _standard, "linear": _linear, "twilio": _twilio, "meta": _meta, "zoom": _zoom,
    "dropbox": _dropbox, "paddle": _paddle, "intercom": _intercom, "discord": _discord, "sendgrid": _sendgrid,
}
"""The sample event of each provider preset (``--event`` sets the name each one carries, where it carries it)."""


def signed_request(provider: str, url: str, secret: str | None, event: str | None = None,
                   data: dict[str, Any] | None = None, now: int | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of ``provider``'s sample for ``url``, signed with ``secret`` (unsigned without one)."""
    now = int(time.time()) if now is None else now
    uid = str(uuid.uuid4())
    sample = SAMPLES[provider](event, uid, now)
    (sample.body[0] if isinstance(sample.body, list) else sample.body).update(data or {})
    raw = sample.raw()
    headers = sample.headers | {"Content-Type": "application/x-www-form-urlencoded" if sample.form
                                else "application/json", "User-Agent": "hookgate-send"}
    if secret:
        headers |= signing.sign(provider, signing.Outgoing(raw, url, now, f"msg_{uid.replace('-', '')}"), secret)
    return raw, headers


async def _trigger(trigger_id: str, args: argparse.Namespace) -> dict[str, Any]:
    """A webhook trigger you may write (its URL, provider and handshake), read with the admin API."""
    settings = client_settings()
    where = settings.gateway(args.url)
    key = args.key or (settings.api_key.get_secret_value() if settings.api_key else None)
    if not key:
        fail("a trigger id needs an API key to find its URL: pass --key or set HOOKGATE_API_KEY (or give its URL)")
    with exit_on_failure(where):
        async with httpx.AsyncClient(base_url=where.url, timeout=30, headers={
                "Authorization": f"Bearer {key}", "User-Agent": "hookgate-send"}) as http:
            trigger = await Client(http).call("GET", f"/v1/triggers/{trigger_id}")
    if trigger.get("kind") != "webhook" or not trigger.get("url"):
        fail(f"trigger {trigger_id} has no webhook URL you may see (a schedule, or you do not write its autopilot)")
    return dict(trigger)


@dataclass(frozen=True)
class HandshakeRequest:
    """A provider's handshake as it sends it: method, URL (with its query), body, headers and the challenge."""

    method: str
    url: str
    raw: bytes
    headers: dict[str, str]
    challenge: str


def _signed_json(provider: str, url: str, body: dict[str, Any], secret: str | None,
                 now: int) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "hookgate-send"}
    if secret and (provider in signing.SIGNERS or PRESET_DATA.get(provider, {}).get("signature", {}).get("kind")
                   == "hmac"):
        headers |= signing.sign(provider, signing.Outgoing(raw, url, now, "msg_handshake"), secret)
    return raw, headers


def handshake_request(handshake: Mapping[str, Any], provider: str, url: str, secret: str | None = None,
                      verify_token: str | None = None, now: int | None = None) -> HandshakeRequest:
    """The handshake of kind ``handshake["kind"]`` to ``url``, signed as ``provider`` where the kind is signed."""
    now = int(time.time()) if now is None else now
    challenge = secrets.token_urlsafe(16)
    kind = handshake["kind"]
    plain = {"User-Agent": "hookgate-send"}
    if kind == "meta":
        query = urlencode({"hub.mode": "subscribe", "hub.verify_token": verify_token or "", "hub.challenge": challenge})
        return HandshakeRequest("GET", f"{url}?{query}", b"", plain, challenge)
    if kind == "echo_query":
        return HandshakeRequest("GET", f"{url}?{urlencode({handshake['param']: challenge})}", b"", plain, challenge)
    if kind == "zoom":
        body = {"event": "endpoint.url_validation", "event_ts": now * 1000, "payload": {"plainToken": challenge}}
    elif kind == "slack_url_verification":
        body = {"type": "url_verification", "token": "sample", "challenge": challenge}
    elif kind == "discord_ping":  # unsigned: the sender's private key is Discord's alone
        return HandshakeRequest("POST", url, b'{"type": 1}', plain | {"Content-Type": "application/json"}, "")
    else:
        fail(f"this trigger answers no handshake (kind {kind!r})")
    raw, headers = _signed_json(provider, url, body, secret, now)
    return HandshakeRequest("POST", url, raw, headers, challenge)


async def _send_handshake(args: argparse.Namespace, url: str, provider: str,
                          own: Mapping[str, Any] | None) -> None:
    handshake = own if own is not None else PRESET_HANDSHAKES.get(provider)
    if handshake is None:
        fail(f"the {provider} preset has no handshake and the trigger sets none")
    shake = handshake_request(handshake, provider, url, args.secret, args.verify_token)
    with exit_on_failure(Gateway(url)):
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.request(shake.method, shake.url, content=shake.raw, headers=shake.headers)
    print(f"{shake.method} {answer.status_code} {answer.text}")
    if answer.status_code >= 400:
        raise SystemExit(1)


def _target(text: str) -> str:
    """An argparse type: a trigger URL (``http(s)://…/hooks/awt_…``) or a trigger id."""
    if text.startswith(("http://", "https://")):
        if "/hooks/" not in text:
            raise argparse.ArgumentTypeError(f"not a trigger URL (…/hooks/awt_…): {text!r}")
        return text
    return resource_id("trigger")(text)


async def run(args: argparse.Namespace) -> None:
    """Send the sample and print the gateway's answer; exit 1 when it refused it, 2 when it never answered."""
    if args.data is not None and not isinstance(args.data, dict):
        fail("--data: a JSON object, whose fields are merged into the sample's body")
    own: Mapping[str, Any] | None = None
    if args.target.startswith(("http://", "https://")):
        url, provider = args.target, "generic"
    else:
        trigger = await _trigger(args.target, args)
        url, provider, own = str(trigger["url"]), str(trigger["provider"]), trigger.get("handshake")
    if args.handshake:
        await _send_handshake(args, url, args.provider or provider, own)
        return
    raw, headers = signed_request(args.provider or provider, url, args.secret, args.event, args.data)
    with exit_on_failure(Gateway(url)):
        async with httpx.AsyncClient(timeout=30) as http:
            body = decoded(await http.post(url, content=raw, headers=headers))
    print(json.dumps(body, indent=2) if args.json else record(body) if isinstance(body, dict) else body)


def add_command(sub: Any) -> None:
    """Add ``hookgate send``."""
    text = "post a signed sample event of a provider preset to a webhook trigger (like `stripe trigger`)"
    p = sub.add_parser("send", help=text, description=text + ". The sample is what the provider sends (its headers, "
                       "a fresh delivery id, a body of its shape), signed with --secret as the provider signs; the "
                       "gateway's answer is printed (exit 1 when it refuses the event).",
                       epilog="env HOOKGATE_URL / HOOKGATE_API_KEY supply --url / --key (only to look up a trigger "
                              "id); exit 1 when the gateway refuses the event, 2 when it is not answered")
    p.add_argument("target", metavar="TRIGGER", type=_target,
                   help="the trigger's URL (http…/hooks/awt_…), or its id (its URL and provider read with the API)")
    p.add_argument("--provider", choices=tuple(SAMPLES),
                   help="preset to sample and sign as (default: the trigger's with an id, else generic)")
    p.add_argument("--secret", help="the trigger's signing secret (for gitlab, its token); none: sent unsigned")
    p.add_argument("--event", help="event name, where the provider carries it (github: X-GitHub-Event, stripe: "
                                   "type, shopify: X-Shopify-Topic, twilio: MessageStatus, …)")
    p.add_argument("--data", type=json_value, metavar="JSON", help="a JSON object merged into the sample's body")
    p.add_argument("--url", help="gateway base URL, to look up a trigger id (env HOOKGATE_URL)")
    p.add_argument("--key", help="admin API key hgk_…, to look up a trigger id (env HOOKGATE_API_KEY)")
    p.add_argument("--json", action="store_true", help="print the gateway's JSON answer as it is")
    p.add_argument("--handshake", action="store_true", help="send the trigger's handshake instead (its own, or its "
                   "preset's: meta, zoom, discord, dropbox, slack); prints METHOD STATUS ANSWER")
    p.add_argument("--verify-token", help="with --handshake on a meta trigger: the verify token Meta would send")
    p.set_defaults(operations=("receive_webhook", "answer_handshake"))
