"""The hostile ingress phase of ``bench/fuzz.py``: ``/hooks/{token}`` of triggers of every scheme family.

Triggers: a custom trigger of each family (HMAC with a timestamp header, HMAC in a structured header with
several signatures, Ed25519, ECDSA P-256, RSA, a shared secret in a header and in the query, HTTP Basic),
each data preset, sources (JSON pointer, form field, query parameter, header), and payload filters (on a
bearer-only trigger, which every request reaches the filter of, and on the shared-secret ones). Requests: what a schema
does not generate: signature headers holding garbage, huge or negative timestamps, repeated and empty parts,
base64 and hex that do not decode, non-ASCII bytes; bodies that are binary, text, XML, deep, over the cap, a
NUL, a form; odd content types and query strings. Handshakes and replies: triggers with each handshake kind
(a Meta verify token set, an echo of `validationToken` as octet-stream) and with a reply of their own (TwiML,
an empty 204, JSON 202); GETs with `hub.*` and `challenge` queries of every shape (wrong, missing, repeated,
huge, not UTF-8), handshake bodies (Zoom's validation, Discord's PING, Slack's url_verification) signed with
garbage. Checks: no 5xx, no stack trace, every error JSON; a 2xx that is not JSON only from a trigger that
may answer text (a handshake's echo, its own reply).
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from hookgate.preset_data import PRESET_DATA

SECRET = "a fuzzing secret, 32 characters"
VERIFY_TOKEN = "a-fuzzing-verify-token"
TEXT_ANSWERS = {"reply-twiml", "reply-204", "reply-202", "echo", "meta-token", "meta", "dropbox"}
"""Triggers whose 2xx may be text: a handshake's echo, or their own reply."""

FILTER = {"or": [{"and": [{"path": "/a/0/b", "in": ["x", 1, None]}, {"not": {"path": "/type", "prefix": "t"}}]},
                 {"path": "/kind", "gte": 0}, {"path": "", "prefix": "<?xml"}, {"path": "/id", "lt": 0.5},
                 {"path": "/0/event", "eq": "delivered"}, {"path": "/data/name", "exists": False}]}
"""Every operator, over the shapes the hostile bodies take (JSON, forms, text, lists)."""


def _pem(key: Any) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _families() -> list[tuple[dict[str, Any], dict[str, Any] | None, str]]:
    """(trigger fields, signing-secret body or None, label) of each family, with sources and filters on some."""
    stamped = {"kind": "hmac", "header": "X-Sig", "signed": "{timestamp}.{body}", "timestamp_header": "X-Ts",
               "encoding": "base64", "algorithm": "sha512"}
    parts = {"kind": "hmac", "header": "Sig", "signature_part": "v1", "timestamp_part": "t",
             "signed": "{timestamp}:{url}:{body}", "prefix": "x"}
    keyed = [("ed25519", ed25519.Ed25519PrivateKey.generate()),
             ("ecdsa_p256_sha256", ec.generate_private_key(ec.SECP256R1())),
             ("rsa_pkcs1_sha256", rsa.generate_private_key(public_exponent=65537, key_size=2048))]
    found: list[tuple[dict[str, Any], dict[str, Any] | None, str]] = [
        ({"provider": "generic", "payload_filter": FILTER, "event_source": "form:kind"}, None, "filter"),
        ({"provider": "custom", "signature": stamped, "event_source": "json:/a/0/b",
          "dedupe_key_source": "header:X-Id"}, {"secret": SECRET}, "hmac"),
        ({"provider": "custom", "signature": parts, "event_source": "form:kind", "dedupe_key_source": "query:id"},
         {"secret": SECRET}, "hmac-parts"),
        ({"provider": "custom", "signature": {"kind": "shared_secret", "header": "Authorization",
                                              "prefix": "Bearer "}, "payload_filter": FILTER}, {"secret": SECRET},
         "bearer"),
        ({"provider": "custom", "signature": {"kind": "shared_secret", "query": "api_key"},
          "payload_filter": {"not": FILTER}}, {"secret": SECRET}, "query"),
        ({"provider": "custom", "signature": {"kind": "basic_auth"}}, {"secret": "user:" + SECRET}, "basic"),
    ]
    for algorithm, key in keyed:
        scheme = {"kind": "public_key", "algorithm": algorithm, "header": "X-Key-Sig", "timestamp_header": "X-Ts",
                  "signed": "{timestamp}{body}", "timestamp_unit": "ms"}
        found.append(({"provider": "custom", "signature": scheme}, {"public_key": _pem(key)}, algorithm))
    found += [
        ({"provider": "custom", "signature": stamped, "reply": {"status": 200, "content_type": "text/xml",
                                                                "body": "<Response/>"}}, {"secret": SECRET},
         "reply-twiml"),
        ({"provider": "generic", "reply": {"status": 204}}, {"secret": SECRET}, "reply-204"),
        ({"provider": "twilio", "reply": {"status": 202, "content_type": "application/json", "body": "{}"}},
         {"secret": SECRET}, "reply-202"),
        ({"provider": "generic", "handshake": {"kind": "echo_query", "param": "validationToken",
                                                "content_type": "application/octet-stream"}}, {"secret": SECRET},
         "echo"),
        ({"provider": "meta", "handshake": {"kind": "meta", "verify_token": VERIFY_TOKEN}}, {"secret": SECRET},
         "meta-token"),
        ({"provider": "custom", "signature": stamped, "handshake": {"kind": "zoom"}}, {"secret": SECRET},
         "zoom-on-custom"),
        ({"provider": "slack", "handshake": {"kind": "discord_ping"}}, {"secret": SECRET}, "ping-on-slack"),
    ]
    for name, data in PRESET_DATA.items():
        if data["signature"]["kind"] == "public_key":
            key = ed25519.Ed25519PrivateKey.generate() if data["signature"]["algorithm"] == "ed25519" else \
                ec.generate_private_key(ec.SECP256R1())
            found.append(({"provider": name}, {"public_key": _pem(key)}, name))
        else:
            found.append(({"provider": name}, {"secret": SECRET}, name))
    return found


def make_triggers(base: str, key: str, autopilot_id: str) -> list[tuple[str, str]]:
    """(token, label) of a trigger of each family, made and keyed through the admin API."""
    made = []
    with httpx.Client(base_url=base, headers={"authorization": f"Bearer {key}"}, timeout=30) as client:
        for fields, secret, label in _families():
            answer = client.post(f"/v1/autopilots/{autopilot_id}/triggers",
                                 json={"kind": "webhook", "rate_limit_per_minute": 1_000_000, **fields})
            answer.raise_for_status()
            trigger = answer.json()
            if secret is not None:
                client.put(f"/v1/triggers/{trigger['id']}/signing-secret", json=secret).raise_for_status()
            made.append((trigger["token"], label))
    return made


def _garbage(rng: random.Random) -> str:
    return rng.choice([
        "", " ", "x", "v1=", "t=,v1=", "t=1,t=2,v1=00", "ts=99999999999999999999;h1=zz", "sha256=" + "0" * 64,
        "=" * 50, base64.b64encode(rng.randbytes(64)).decode(), rng.randbytes(32).hex(), "%00", "é" * 10,
        "v0=" + "f" * 1000, "t=-5,v1=ab", "x" + base64.b64encode(rng.randbytes(rng.randint(0, 300))).decode(),
        "Bearer " + SECRET, "Basic " + base64.b64encode(rng.randbytes(20)).decode(), "Basic !!!",
        "v1," + base64.b64encode(rng.randbytes(32)).decode(),
    ])


def _stamp(rng: random.Random) -> str:
    return rng.choice(["1700000000", "0", "-1", "99999999999999999999999", "1e9", "", "now", "1700000000000",
                       str(rng.randint(0, 2**64)), "१२३"])


_NAMES = ["x-sig", "x-ts", "sig", "authorization", "x-key-sig", "x-id", "x-hub-signature-256", "x-hub-signature",
          "x-zm-signature", "x-zm-request-timestamp", "x-dropbox-signature", "paddle-signature",
          "x-signature-ed25519", "x-signature-timestamp", "x-twilio-email-event-webhook-signature",
          "x-twilio-email-event-webhook-timestamp"]


def _request(rng: random.Random) -> tuple[str, bytes, dict[bytes, bytes]]:
    """A query string, a body and headers (bytes, so that non-ASCII values go out as sent)."""
    deep = rng.choice([10, 64, 65, 5000])
    body = rng.choice([
        lambda: json.dumps({"a": [{"b": rng.choice(["x", 1, None, [], {}])}], "type": "t", "id": rng.random()}),
        lambda: "[" * deep + "1" + "]" * deep,
        lambda: "kind=a&id=%00&payload=" + rng.choice(["%7B%7D", "%7B", "x"]),
        lambda: "<?xml version='1.0'?><a>" + "x" * rng.randint(0, 100) + "</a>",
        lambda: rng.randbytes(rng.randint(0, 400)),
        lambda: '{"a": "\\u0000"}',
        lambda: "x" * (256 * 1024 + rng.randint(1, 10)),
        lambda: json.dumps([{"event": "delivered", "sg_event_id": rng.random()}]),
        lambda: '{"object": "page", "event": 1, "event_type": [], "topic": {}, "data": {"name": 5}}',
        lambda: json.dumps({"event": "endpoint.url_validation",
                            "payload": rng.choice([{"plainToken": "x" * rng.randint(0, 3000)}, {}, [], None,
                                                   {"plainToken": 5}])}),
        lambda: json.dumps({"type": rng.choice([1, True, "1", 1.0, None])}),
        lambda: json.dumps({"type": "url_verification", "challenge": rng.choice(["c", "", None, 7, "é" * 500])}),
    ])()
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    content_type = rng.choice(["application/json", "text/plain", "application/xml", "application/x-www-form-urlencoded",
                               "", "image/png", "application/json; charset=latin-1", "text/csv; q=1"])
    headers = {b"content-type": content_type.encode()}
    for name in rng.sample(_NAMES, rng.randint(0, 6)):
        value = _stamp(rng) if "ts" in name or "timestamp" in name else _garbage(rng)
        headers[name.encode()] = value.encode("utf-8", "surrogatepass")
    query = rng.choice(["", "?api_key=" + SECRET, "?api_key=", "?id=1&id=2", "?%ff=1", "?api_key=%00",
                        "?" + "a=1&" * 200, "?challenge=x", *_HANDSHAKE_QUERIES, "?challenge=" + "y" * 3000,
                        "?validationToken=" + rng.choice(["t", "", "%00", "%ff%fe", "z" * 2049])])
    return query, raw, headers


_HANDSHAKE_QUERIES = [
    f"?hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge=123",
    "?hub.mode=subscribe&hub.verify_token=wrong&hub.challenge=123",
    f"?hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}", f"?hub.mode=unsubscribe&hub.verify_token={VERIFY_TOKEN}",
    f"?hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge=", "?hub.mode=subscribe&hub.mode=x",
    f"?hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge=%ff", "?challenge=", "?challenge=%00",
]


@dataclass
class Found:
    """Tallies of the hostile ingress phase."""

    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def hostile_ingress(base: str, triggers: list[tuple[str, str]], n: int, seed: int) -> Found:
    """``n`` hostile requests spread over ``triggers``; failures are 5xx, tracebacks and non-JSON answers."""
    rng, found = random.Random(seed), Found()
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(n):
            token, label = rng.choice(triggers)
            query, raw, headers = _request(rng)
            method = rng.choice(["POST", "POST", "GET"])
            if method == "GET" and rng.random() < 0.5:  # GETs are handshakes: mostly handshake-shaped queries
                query = rng.choice(_HANDSHAKE_QUERIES)
            try:
                answer = client.request(method, f"/hooks/{token}{query}", content=raw, headers=headers)
            except httpx.LocalProtocolError:
                continue  # a header value httpx will not send (surrounding spaces): not a request
            except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
                found.requests += 1  # the server may close a connection sending past the cap
                continue
            found.requests += 1
            found.statuses[answer.status_code] = found.statuses.get(answer.status_code, 0) + 1
            text = answer.text
            try:
                shape = json.loads(text)
            except ValueError:
                shape = None
            text_ok = label in TEXT_ANSWERS and answer.status_code < 300 and not answer.headers.get(
                "content-type", "").startswith("application/json")
            if answer.status_code >= 500 or "Traceback" in text or not (isinstance(shape, dict) or text_ok):
                found.failures.append(f"{label} {method} {answer.status_code} {query[:40]} {headers} {raw[:80]!r}: "
                                      f"{text[:200]}")
    return found
