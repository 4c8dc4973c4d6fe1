"""``POST /hooks/{token}`` and the handshakes' ``GET`` in ``/openapi.json``: bodies, headers, every answer.

The headers come from the presets (:func:`gateway.schemes.get_preset`, code and data alike), so the document
names what the code reads. The answer models describe the bodies :mod:`gateway.ingress` writes by hand on its hot path;
``tests/gateway/admin/test_openapi.py`` sends each kind of request and checks the answer against them.
"""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from gateway import schemes
from gateway.admin.openapi import Answer, Error, Operation
from gateway.ingress import endpoint as ingress
from gateway.providers import Preset


class Accepted(BaseModel):
    """Stored and admitted: a run is pending (``run_id`` null only when the worker admits it later)."""

    status: Literal["accepted"]
    delivery_id: UUID
    run_id: UUID | None
    autopilot_id: UUID
    trigger_id: UUID


class Duplicate(BaseModel):
    """Already received under this dedupe key; ``body_matches`` false when the body differs from the first."""

    status: Literal["duplicate"]
    delivery_id: UUID
    run_id: UUID | None
    body_matches: bool | None


class Skipped(BaseModel):
    """Stored, and its run recorded as skipped by the admission gate (e.g. ``agent_paused``)."""

    status: Literal["skipped"]
    delivery_id: UUID
    run_id: UUID | None
    reason: str


class Ignored(BaseModel):
    """Stored, no run: the trigger is disabled, the autopilot paused or archived, the event or the body filtered out."""

    status: Literal["ignored"]
    delivery_id: UUID
    reason: Literal["trigger_disabled", "autopilot_paused", "autopilot_archived", "event_filtered", "payload_filter"]


class SlackChallenge(BaseModel):
    """Slack's ``url_verification``: its challenge echoed, nothing stored."""

    challenge: str


class ZoomValidation(BaseModel):
    """Zoom's ``endpoint.url_validation``: the plain token and its HMAC-SHA256 (hex) keyed by the secret."""

    plainToken: str  # Zoom's own spelling
    encryptedToken: str


class DiscordPong(BaseModel):
    """Discord's PING answered: ``{"type": 1}``."""

    type: Literal[1]


class Rejected(BaseModel):
    """Stored as rejected: the signature is invalid, missing or outside the tolerance; no run."""

    status: Literal["rejected"]
    delivery_id: UUID
    reason: Literal["invalid_signature", "missing_signature", "expired_timestamp"]
    error: Literal["invalid_signature", "missing_signature", "expired_timestamp"]
    message: str


class BodyRefused(BaseModel):
    """A body not stored (empty, not JSON or a form, too deep, NUL characters); a bad handshake, no ``detail``."""

    error: str
    message: str
    detail: str | None = None


class JsonBody(BaseModel):
    """Any JSON object or array (also ``application/*+json``); the preset reads its fields."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"type": ["object", "array"]})


class FormBody(BaseModel):
    """URL-encoded form fields (Slack slash commands, Twilio); a lone ``payload`` field holding JSON is that JSON."""

    model_config = ConfigDict(extra="allow")


def _roles(preset: Preset) -> dict[str, list[str]]:
    """What ``preset`` reads each header for: signature, dedupe key, event name, or kept on the delivery."""
    roles: dict[str, list[str]] = {}
    for name in sorted(preset.signature_headers):
        roles.setdefault(name, []).append("signature (never stored)")
    for rank, source in enumerate(preset.dedupe_sources, 1):
        kind, _, name = source.partition(":")
        if kind == "header":
            roles.setdefault(name, []).append(f"dedupe key (source {rank} of {len(preset.dedupe_sources)})")
    for name in sorted(preset.event_headers):
        roles.setdefault(name, []).append("event name")
    for name in sorted(preset.stored_headers - preset.event_headers):
        roles.setdefault(name, []).append("kept on the delivery")
    return roles


def _presets() -> list[Preset]:
    return [schemes.get_preset(name) for name in schemes.preset_names()]


def header_parameters() -> list[dict[str, Any]]:
    """One optional header parameter per header any preset reads, saying which preset reads it for what."""
    uses: dict[str, list[str]] = {}
    for preset in _presets():
        for name, roles in _roles(preset).items():
            uses.setdefault(name, []).append(f"{preset.name}: {', '.join(roles)}")
    return [{"name": name, "in": "header", "required": False, "schema": {"type": "string"},
             "description": "; ".join(uses[name])} for name in sorted(uses)]


def _body_keys() -> str:
    return ", ".join(f"{p.name} `{s.removeprefix('body:')}`" for p in _presets()
                     for s in p.dedupe_sources if s.startswith("body:"))


_TOKEN = {"name": "token", "in": "path", "required": True, "schema": {"type": "string"},
          "description": f"The trigger's secret token (`{ingress.TOKEN_PREFIX}…`, shown when the trigger is created "
                         "or rotated): it is the credential. Any unknown, malformed or rotated token is 404."}
_CUSTOM = "the trigger's own reply (`reply`: 200, 201, 202 or 204, its content type and body) if it has one"
_ANSWERS = {
    200: Answer("Stored and committed before this answer (or a handshake answered, nothing stored); accepted and "
                "duplicate deliveries get " + _CUSTOM,
                (Accepted, Duplicate, Skipped, Ignored, SlackChallenge, ZoomValidation, DiscordPong), text=True),
    201: Answer("Accepted or duplicate: " + _CUSTOM, text=True),
    202: Answer("Accepted or duplicate: " + _CUSTOM, text=True),
    204: Answer("Accepted or duplicate: " + _CUSTOM),
    400: Answer("The body cannot be stored (`invalid_body`), or a malformed handshake (`invalid_handshake`)",
                (BodyRefused,)),
    401: Answer("Stored as rejected: bad, missing or stale signature (a handshake's: nothing stored)",
                (Rejected,)),
    404: Answer("No live webhook trigger has this token (`not_found`); always the same bytes", (Error,)),
    409: Answer("A Zoom or Discord handshake on a trigger without its secret or key (`handshake_needs_secret`)",
                (Error,)),
    413: Answer(f"The body is larger than {ingress.BODY_CAP // 1024} KiB (`payload_too_large`)", (Error,)),
    415: Answer("Neither JSON nor a URL-encoded form (`unsupported_media_type`)", (BodyRefused,)),
    429: Answer("Too many requests, or too many bad tokens and signatures, from this address (`rate_limited`)",
                (Error,), retry_after=True),
    503: Answer("The database is unavailable (`unavailable`): nothing was stored; retry after Retry-After",
                (Error,), retry_after=True),
}

OPERATION = Operation(
    "POST", "/hooks/{token}", "receive_webhook", "Receive a webhook", "webhooks", _ANSWERS, ({},),
    {"application/json": JsonBody, "application/x-www-form-urlencoded": FormBody},
    (_TOKEN, *header_parameters()),
    "A 2xx means the delivery is committed. The trigger's preset (docs/PROVIDERS.md) names the event, picks the "
    "dedupe key (the headers below, or the body field of " + _body_keys() + ") and checks the signature with the "
    "trigger's secret; with no secret set, the token alone is the credential. No `Authorization` is read. A "
    "trigger's handshake (Zoom's URL validation, Discord's PING, Slack's url_verification, an echoed query "
    "parameter) is answered without storing anything, and a trigger's own `reply` answers accepted and duplicate "
    "deliveries instead of the JSON receipt (docs/PROVIDERS.md).",
)
"""The webhook ingress as documented in ``/openapi.json``."""

_QUERY = tuple({"name": name, "in": "query", "required": False, "schema": {"type": "string"}, "description": what}
               for name, what in (("hub.mode", "meta: `subscribe`"),
                                  ("hub.verify_token", "meta: compared with the trigger's verify token"),
                                  ("hub.challenge", "meta: answered as text"),
                                  ("challenge", "echo_query with `param: challenge` (Dropbox): answered as text")))
_GET_ANSWERS = {
    200: Answer("The handshake answered as text (Meta's `hub.challenge`, the echoed parameter); nothing stored",
                text=True),
    400: Answer("Not the handshake the trigger expects (`invalid_handshake`)", (Error,)),
    403: Answer("`hub.verify_token` is not the trigger's (`verify_token_mismatch`)", (Error,)),
    404: _ANSWERS[404],
    405: Answer("The trigger answers no GET handshake (`method_not_allowed`)", (Error,)),
    409: Answer("A meta handshake on a trigger without a verify token (`handshake_needs_verify_token`)", (Error,)),
    413: _ANSWERS[413],
    429: _ANSWERS[429],
    503: _ANSWERS[503],
}
GET_OPERATION = Operation(
    "GET", "/hooks/{token}", "answer_handshake", "Answer a provider's GET handshake", "webhooks", _GET_ANSWERS, ({},),
    {}, (_TOKEN, *_QUERY),
    "For a trigger whose handshake (its own, or its preset's) is `meta` or `echo_query` (docs/PROVIDERS.md, "
    "\"Handshakes\"): after the rate gates and the token lookup, the challenge is answered as text. Nothing is "
    "stored and no run starts.",
)
"""The handshakes' GET as documented in ``/openapi.json``."""
OPERATIONS = (OPERATION, GET_OPERATION)
"""Both webhook operations."""
