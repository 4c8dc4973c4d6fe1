"""Handshakes: requests a provider sends to prove it owns a URL, answered at ingress (docs/PROVIDERS.md).

A handshake is answered after the rate gates and the token lookup, stores no delivery and starts no run.
Each kind is one JSON object on the trigger (`handshake`, validated on save), or its preset's default:

- `meta`: Meta's `GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…`; the verify token is compared
  in constant time with the trigger's own (stored encrypted, never in this JSON); the answer is the challenge.
- `echo_query`: one query parameter's value echoed (Dropbox's `GET ?challenge=`, Microsoft Graph's
  `?validationToken=`), on any method, as `text/plain` by default.
- `zoom`: an `endpoint.url_validation` event, once its signature verified, answered `{"plainToken",
  "encryptedToken"}`: the hex HMAC-SHA256 of the plain token keyed by the secret that verified it.
- `discord_ping`: an interaction `{"type": 1}` answered `{"type": 1}` once its signature verified; a bad one
  is 401 like any delivery (Discord sends one on purpose before it saves the URL).
- `slack_url_verification`: Slack's `{"type": "url_verification", "challenge"}` answered with the challenge
  once verified (or when the trigger has no secret: bearer-only, as Slack presets always did).
- `none`: no handshake, even where the preset has one.

Pure functions over the request; the endpoint (:mod:`gateway.ingress.endpoint`) runs them in its order.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from gateway import providers
from gateway.envelope import Payload
from gateway.providers import Inbound, Preset
from hookgate.preset_data import PRESET_HANDSHAKES

__all__ = ["Handshake", "HandshakeAnswer", "answer_get", "answer_query", "answer_signed", "for_trigger",
           "parse_handshake", "signed_kind_wants", "stored"]

MAX_ECHO = 2048
"""Longest value echoed back (a challenge is a few dozen characters; this is no reflection service)."""
_MAX_FIELDS = 100
_TEXT = b"text/plain; charset=utf-8"
_JSON = b"application/json"

VerifyToken = Annotated[str, Field(min_length=8, max_length=200, pattern=r"^[\x21-\x7e]+$")]
"""A Meta verify token: printable ASCII without spaces, chosen by the user and typed into Meta's dashboard."""


class MetaHandshake(BaseModel):
    """Meta's GET subscription check against the trigger's verify token."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["meta"]
    verify_token: VerifyToken | None = None
    """Write-only: stored encrypted apart from this JSON; absent keeps the token already set."""


class EchoQueryHandshake(BaseModel):
    """Echo one query parameter (Dropbox `challenge`, Microsoft Graph `validationToken`)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["echo_query"]
    param: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._~-]+$")
    content_type: Literal["text/plain", "application/octet-stream"] = "text/plain"
    """Never HTML: the value is the caller's own text."""


class ZoomHandshake(BaseModel):
    """Zoom's `endpoint.url_validation`."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["zoom"]


class DiscordPingHandshake(BaseModel):
    """Discord's interaction PING."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["discord_ping"]


class SlackHandshake(BaseModel):
    """Slack's Events API `url_verification`."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["slack_url_verification"]


class NoHandshake(BaseModel):
    """No handshake, even where the trigger's preset has one."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["none"]


Handshake = Annotated[
    MetaHandshake | EchoQueryHandshake | ZoomHandshake | DiscordPingHandshake | SlackHandshake | NoHandshake,
    Field(discriminator="kind"),
]
"""A trigger's handshake, by kind."""
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Handshake)
AnyHandshake = MetaHandshake | EchoQueryHandshake | ZoomHandshake | DiscordPingHandshake | SlackHandshake | NoHandshake


def parse_handshake(data: object) -> AnyHandshake:
    """A validated handshake from its JSON object; pydantic's ValidationError if not."""
    return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]


def stored(handshake: AnyHandshake) -> dict[str, Any]:
    """The JSON kept on the trigger: everything but a verify token (that is encrypted apart)."""
    return handshake.model_dump(mode="json", exclude={"verify_token"} if isinstance(handshake, MetaHandshake) else None)


def for_trigger(provider: str, own: Mapping[str, Any] | None) -> AnyHandshake | None:
    """The handshake a trigger answers: its own, else its preset's; None for none."""
    data = own if own is not None else PRESET_HANDSHAKES.get(provider)
    if data is None:
        return None
    handshake = parse_handshake(dict(data))
    return None if isinstance(handshake, NoHandshake) else handshake


@dataclass(frozen=True)
class HandshakeAnswer:
    """What the endpoint sends: status, body, content type; ``charge`` adds bad-credential debt."""

    status: int
    body: bytes
    content_type: bytes = _JSON
    charge: bool = False

    @classmethod
    def error_response(cls, status: int, code: str, message: str, *, charge: bool = False) -> HandshakeAnswer:
        """A JSON error ``{"error", "message"}``."""
        return cls(status, json.dumps({"error": code, "message": message}).encode(), charge=charge)


def _invalid(message: str) -> HandshakeAnswer:
    return HandshakeAnswer.error_response(400, "invalid_handshake", message)


def _query(query_string: bytes) -> dict[str, str] | None:
    """The first value of each query parameter; None if the query is not UTF-8 or has too many fields."""
    try:
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, encoding="utf-8",
                          errors="strict", max_num_fields=_MAX_FIELDS)
    except ValueError:  # UnicodeDecodeError included
        return None
    query: dict[str, str] = {}
    for name, value in pairs:
        query.setdefault(name, value)
    return query


def _same(given: str, expected: str) -> bool:
    """Constant time whatever the lengths: both sides are hashed to 32 bytes first."""
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), hashlib.sha256(expected.encode()).digest())


def _text(value: str, content_type: bytes = _TEXT) -> HandshakeAnswer:
    if not value or len(value) > MAX_ECHO:
        return _invalid(f"the value to echo must be 1 to {MAX_ECHO} characters")
    return HandshakeAnswer(200, value.encode(), content_type)


def answer_query(handshake: AnyHandshake | None, query_string: bytes) -> HandshakeAnswer | None:
    """An `echo_query` handshake whose parameter is in the query, on any method; else None (not one)."""
    if not isinstance(handshake, EchoQueryHandshake):
        return None
    query = _query(query_string)
    if query is None:
        return _invalid("the query string is not valid UTF-8 form encoding")
    value = query.get(handshake.param)
    if value is None:
        return None
    content_type = _TEXT if handshake.content_type == "text/plain" else handshake.content_type.encode()
    return _text(value, content_type)


def answer_get(handshake: AnyHandshake | None, query_string: bytes, verify_token: str | None) -> HandshakeAnswer:
    """A GET: Meta's check or an echo; 405 for a trigger whose handshake (if any) is not a GET."""
    if isinstance(handshake, EchoQueryHandshake):
        answer = answer_query(handshake, query_string)
        return answer or _invalid(f"the query has no {handshake.param}")
    if not isinstance(handshake, MetaHandshake):
        return HandshakeAnswer.error_response(405, "method_not_allowed",
                                              "this trigger takes POST; its handshake (if any) is not a GET")
    query = _query(query_string)
    if query is None:
        return _invalid("the query string is not valid UTF-8 form encoding")
    if query.get("hub.mode") != "subscribe" or "hub.challenge" not in query:
        return _invalid("expected hub.mode=subscribe, hub.verify_token and hub.challenge")
    if verify_token is None:
        return HandshakeAnswer.error_response(409, "handshake_needs_verify_token",
                                              "set a verify token on this trigger (handshake.verify_token) first")
    if not _same(query.get("hub.verify_token", ""), verify_token):
        return HandshakeAnswer.error_response(403, "verify_token_mismatch", "hub.verify_token does not match",
                                              charge=True)
    return _text(query["hub.challenge"])


def signed_kind_wants(handshake: AnyHandshake | None, payload: Payload) -> bool:
    """Whether a POST body is the handshake of a signed kind (Zoom, Discord, Slack)."""
    if not isinstance(payload, dict):
        return False
    if isinstance(handshake, ZoomHandshake):
        return payload.get("event") == "endpoint.url_validation"
    if isinstance(handshake, DiscordPingHandshake):
        kind = payload.get("type")
        return kind == 1 and not isinstance(kind, bool)
    if isinstance(handshake, SlackHandshake):
        return payload.get("type") == "url_verification"
    return False


def answer_signed(handshake: AnyHandshake, inbound: Inbound, preset: Preset,
                  secrets: Sequence[str]) -> HandshakeAnswer | None:
    """The answer to a signed handshake whose signature verified (or needed none); None if it was refused.

    The caller has checked it with ``preset.verify`` first and answers a refusal as it answers any delivery's.
    """
    live = [secret for secret in secrets if secret]
    if isinstance(handshake, SlackHandshake):
        challenge = providers.slack_challenge(inbound)
        if challenge is None:
            return _invalid("url_verification without a challenge")
        return HandshakeAnswer(200, json.dumps({"challenge": challenge}).encode())
    if not live:
        return HandshakeAnswer.error_response(409, "handshake_needs_secret", "this handshake needs the trigger's "
                                              "signing secret or public key: set it first (PUT …/signing-secret)")
    if isinstance(handshake, DiscordPingHandshake):
        return HandshakeAnswer(200, b'{"type":1}')
    plain = inbound.field("payload", "plainToken")
    if not isinstance(plain, str) or not plain or len(plain) > MAX_ECHO:
        return _invalid("endpoint.url_validation without a payload.plainToken")
    secret = next((s for s in live if preset.check(inbound, s) == "valid"), None)
    if secret is None:
        return None
    encrypted = hmac.new(secret.encode(), plain.encode(), hashlib.sha256).hexdigest()
    return HandshakeAnswer(200, json.dumps({"plainToken": plain, "encryptedToken": encrypted}).encode())
