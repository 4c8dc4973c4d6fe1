"""``POST /hooks/{token}`` (and ``GET`` for handshakes): the twelve steps of ARCHITECTURE §4, in that order.

1 IP gates (:mod:`gateway.ratelimit`) · 2 token lookup by digest (:mod:`gateway.ingress.triggers`) ·
3 256 KiB cap while streaming · 4 trigger/autopilot/workspace cross-check · 5 envelope
(:mod:`gateway.envelope`) · 6 event, dedupe key and signature (:mod:`gateway.providers`,
:mod:`gateway.ingress.decision`) · 8-10 reject, ignore, admit, decided without I/O
(:mod:`gateway.ingress.decision`) · 7-10, 12 persist and answer (:mod:`gateway.ingress.persist`, written
with concurrent requests in one commit by :mod:`gateway.ingress.batch`) · 11 wake the worker
(:mod:`gateway.ingress.notifier`).

A handshake (:mod:`gateway.handshakes`) is answered within those steps and stores nothing: a GET (Meta's,
an echo) after step 4; an echoed query parameter on a POST before step 5 reads the body as one; a signed kind
(Zoom, Discord, Slack) after its signature was checked in step 6, whose refusal is a 401 like a delivery's.
A trigger's own success reply (:mod:`gateway.replies`) replaces the receipt of accepted and duplicate answers.

Every miss (malformed, unknown, rotated, schedule or deleted trigger, workspace mismatch) is the same
404 bytes. The body of an unknown token is never read. No 2xx leaves before its commit; if the database
is unreachable, a connection cannot be had in ``pool_acquire_timeout`` or the write fails, the answer is
503 with ``Retry-After`` so the provider retries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway import bodies, handshakes, ratelimit
from gateway.envelope import BodyError, Payload, parse_body_with_text
from gateway.handshakes import AnyHandshake, HandshakeAnswer
from gateway.ingress import decision, persist
from gateway.ingress.batch import IngestBatcher
from gateway.ingress.notifier import DeliveryNotifier
from gateway.ingress.quota import WorkspaceQueues
from gateway.ingress.triggers import Trigger, TriggerLookup
from gateway.providers import Inbound
from hookgate import crypto, database, jsontext, logs
from hookgate.context import Context

log = logging.getLogger("hookgate.ingress")

BODY_CAP = 256 * 1024
RETRY_AFTER_UNAVAILABLE_S = 5
TOKEN_PREFIX = "awt_"
_JSON = b"application/json"
NOT_FOUND = b'{"error":"not_found","message":"not found"}'
TOO_LARGE = b'{"error":"payload_too_large","message":"the body is larger than 256 KiB"}'
UNAVAILABLE = b'{"error":"unavailable","message":"the database is unavailable; retry later"}'
_DB_ERRORS: tuple[type[Exception], ...] = (*database.DATABASE_ERRORS, crypto.DecryptError)


@dataclass
class IngressState:
    """Per-app state of the ingress: the context, the IP gates, the token lookup, the notifier and writer."""

    ctx: Context
    gates: ratelimit.RateGates
    triggers: TriggerLookup
    notifier: DeliveryNotifier
    writer: IngestBatcher
    queues: WorkspaceQueues

    @classmethod
    def create(cls, ctx: Context) -> IngressState:
        """Fresh gates, lookup cache, notifier, batch writer and workspace queue limit for an app over ``ctx``."""
        s = ctx.settings
        notifier = DeliveryNotifier(ctx.pool, s.pool_acquire_timeout)
        writer = IngestBatcher(ctx.pool, s.pool_acquire_timeout, size=s.ingest_batch_max, inflight=s.ingest_inflight)
        queues = WorkspaceQueues(ctx.pool, s.workspace_max_queued, s.pool_acquire_timeout)
        return cls(ctx, ratelimit.RateGates(s), TriggerLookup(ctx), notifier, writer, queues)


def ingress_state(app: Starlette) -> IngressState:
    """The app's ingress state, created on first use (tests may install their own beforehand)."""
    state: IngressState | None = getattr(app.state, "ingress", None)
    if state is None:
        state = app.state.ingress = IngressState.create(app.state.ctx)
    return state


@dataclass(frozen=True)
class Reply:
    """An answer of the endpoint: status, body bytes (JSON unless ``content_type`` says) and extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    content_type: bytes = _JSON

    @classmethod
    def json(cls, status: int, content: object, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Reply:
        """``content`` rendered as Starlette's ``JSONResponse`` renders it (compact UTF-8)."""
        return cls(status, _encode(content).encode(), headers)

    async def __call__(self, send: Send) -> None:
        """Send the answer."""
        await send({"type": "http.response.start", "status": self.status, "headers": [
            *self.headers, (b"content-length", str(len(self.body)).encode()), (b"content-type", self.content_type)]})
        await send({"type": "http.response.body", "body": self.body})


_encode = jsontext.compact_encoder(allow_nan=False)
_RETRY_AFTER = ((b"retry-after", str(RETRY_AFTER_UNAVAILABLE_S).encode()),)
_RETRY_AFTER_QUEUE_FULL = ((b"retry-after", str(decision.RETRY_AFTER_QUEUE_FULL_S).encode()),)
_NOSNIFF = ((b"x-content-type-options", b"nosniff"),)
_NOT_FOUND = Reply(404, NOT_FOUND)
_TOO_LARGE = Reply(413, TOO_LARGE)
_UNAVAILABLE = Reply(503, UNAVAILABLE, _RETRY_AFTER)


def _headers(scope: Scope) -> dict[str, str]:
    # Lower-cased names; NULs dropped because PostgreSQL text cannot hold them.
    return {k.decode("latin-1"): v.decode("latin-1").replace("\x00", "") for k, v in scope["headers"]}


async def _read_capped(receive: Receive, declared: str) -> bytes | None:
    """Step 3: the whole body, or None as soon as it passes the cap (whatever Content-Length said)."""
    try:
        return await bodies.read_capped(receive, declared, BODY_CAP)
    except ClientDisconnect:
        return b""  # the sender is gone; an empty body is refused as invalid and nothing is stored


def _inbound(state: IngressState, scope: Scope, trigger: Trigger, raw: bytes, headers: dict[str, str],
             payload: Payload) -> Inbound:
    """What a provider preset verifies: the request as sent, at the URL the provider signed, by the DB clock."""
    query = scope.get("query_string", b"").decode("latin-1")
    url = state.ctx.settings.public_url.rstrip("/") + scope["path"] + (f"?{query}" if query else "")
    return Inbound(raw=raw, headers=headers, body=payload, url=url, now=trigger.now())


def _handshake(state: IngressState, ip: bytes, answer: HandshakeAnswer) -> Reply:
    """A handshake's answer; nothing was stored and no run started."""
    if answer.charge:
        state.gates.charge(ip)
    logs.bind(outcome="handshake")
    return Reply(answer.status, answer.body, _NOSNIFF, answer.content_type)


def _success(trigger: Trigger, answer: persist.Answer) -> Reply | None:
    """The trigger's own reply to an accepted or duplicate delivery, its id in a header; None: the receipt."""
    if trigger.reply is None or answer.status != 200 or answer.body.get("status") not in ("accepted", "duplicate"):
        return None
    status, body, content_type = trigger.reply.encoded()
    delivery = ((b"hookgate-delivery-id", str(answer.body.get("delivery_id")).encode()),)
    return Reply(status, body, delivery + _NOSNIFF, content_type)


async def _reread(state: IngressState, ip: bytes, trigger: Trigger) -> Trigger | None:
    """The trigger as of now, not as cached: a handshake writes nothing, so no write would notice a stale read.

    Handshakes are rare (a provider sends one when a URL is saved), so the query is cheap; None is a 404.
    """
    fresh = await state.triggers.find(trigger.digest, cached=False)
    if fresh is None or not fresh.consistent:
        state.triggers.cache.drop(trigger.digest)
        state.gates.charge(ip)
        return None
    return fresh


async def _query_handshake(state: IngressState, scope: Scope, ip: bytes, trigger: Trigger) -> Reply | None:
    """A GET (only ever a handshake), or a POST whose query holds an echoed parameter; None for anything else."""
    query_string: bytes = scope.get("query_string", b"")
    if scope["method"] != "POST":
        if (now := await _reread(state, ip, trigger)) is None:
            return _NOT_FOUND
        return _handshake(state, ip, handshakes.answer_get(now.handshake, query_string, now.verify_token))
    if trigger.handshake is None or handshakes.answer_query(trigger.handshake, query_string) is None:
        return None
    if (now := await _reread(state, ip, trigger)) is None:
        return _NOT_FOUND
    echo = handshakes.answer_query(now.handshake, query_string)
    return None if echo is None else _handshake(state, ip, echo)


def _signed_handshake(state: IngressState, scope: Scope, ip: bytes, trigger: Trigger, handshake: AnyHandshake,
                      request: tuple[bytes, dict[str, str], Payload]) -> Reply:
    """Zoom's, Discord's or Slack's handshake: step 6, then its answer or a 401; nothing stored either way."""
    raw, headers, payload = request
    inbound = _inbound(state, scope, trigger, raw, headers, payload)
    received = decision.verify(trigger, inbound, payload)  # step 6
    if received.signature in decision.REJECTED:
        state.gates.charge(ip)
        return _refused(received)
    shaken = handshakes.answer_signed(handshake, inbound, trigger.preset, trigger.secrets)
    return _handshake(state, ip, shaken) if shaken is not None else _refused(received)


def _refused(received: decision.Received) -> Reply:
    """A signed handshake whose signature failed: 401 as for a delivery, but nothing stored."""
    code = decision.REJECTED[received.signature]
    return Reply.json(401, {"status": "rejected", "reason": code, "error": code,
                            "message": decision.REJECTED_TEXT[code]})


async def verify_and_ingest(state: IngressState, scope: Scope, ip: bytes, trigger: Trigger, raw: bytes) -> Reply:
    """Steps 4-12 for a request whose trigger was found and whose body was read."""
    if not trigger.consistent:  # step 4
        state.gates.charge(ip)
        return _NOT_FOUND
    if (early := await _query_handshake(state, scope, ip, trigger)) is not None:
        return early
    headers = _headers(scope)
    try:  # step 5
        payload, payload_text = parse_body_with_text(raw, headers.get("content-type"))
        if (why := jsontext.unstorable(raw, payload, floats=payload_text is None)) is not None:
            raise BodyError(why)
    except BodyError as exc:
        status = 415 if exc.code == "unsupported_media_type" else 400
        return Reply.json(status, {"error": exc.code, "message": exc.detail, "detail": exc.detail})
    if trigger.handshake is not None and handshakes.signed_kind_wants(trigger.handshake, payload):
        if (now := await _reread(state, ip, trigger)) is None:
            return _NOT_FOUND
        trigger = now  # a handshake writes nothing: judged on the trigger as of now, not as cached
        if trigger.handshake is not None and handshakes.signed_kind_wants(trigger.handshake, payload):
            return _signed_handshake(state, scope, ip, trigger, trigger.handshake, (raw, headers, payload))
    # The workspace's limit of waiting runs: a set lookup (gateway.ingress.quota), no query per request.
    queue_full = state.queues.limit > 0 and await state.queues.full(trigger.workspace_id)
    for attempt in range(2):
        inbound = _inbound(state, scope, trigger, raw, headers, payload)
        received = decision.verify(trigger, inbound, payload, payload_text)  # step 6
        try:
            answer = await persist.persist_delivery(state.writer, trigger, received, queue_full=queue_full)
        except persist.Stale:
            state.triggers.cache.drop(trigger.digest)
            if attempt:
                break  # changed again under us: the provider retries shortly
            fresh = await state.triggers.find(trigger.digest, cached=False)
            if fresh is None or not fresh.consistent:
                state.gates.charge(ip)
                return _NOT_FOUND
            trigger = fresh
            continue
        if answer.charge:
            state.gates.charge(ip)
        if answer.wake is not None:
            state.notifier.announce(answer.wake)  # step 11, after the commit
        logs.bind(outcome=answer.body.get("status"), delivery_id=answer.body.get("delivery_id"),
                  run_id=answer.body.get("run_id"))  # access log, ingress metrics (gateway.access)
        if (own := _success(trigger, answer)) is not None:
            return own
        return Reply.json(answer.status, answer.body, _RETRY_AFTER_QUEUE_FULL if answer.status == 429 else ())
    return _UNAVAILABLE


async def answer(scope: Scope, receive: Receive) -> Reply:
    """The twelve steps for one request; see the module docstring for their order."""
    state = ingress_state(scope["app"])
    client = scope.get("client")
    request_headers = Headers(scope=scope)
    ip = ratelimit.client_key(client[0] if client else None, request_headers, state.gates.trusted)
    if (wait := state.gates.admit(ip)) is not None:  # step 1
        return Reply.json(429, {"error": "rate_limited", "message": "too many requests from this address"},
                          ((b"retry-after", str(wait).encode()),))
    token = scope["path_params"]["token"]
    if not crypto.token_shape_ok(token, TOKEN_PREFIX):  # step 2, without a query
        state.gates.charge(ip)
        return _NOT_FOUND
    try:
        trigger = await state.triggers.find(crypto.digest(token))
        if trigger is None:
            state.gates.charge(ip)
            return _NOT_FOUND
        logs.bind(trigger_id=str(trigger.id), preset=trigger.provider)
        raw = await _read_capped(receive, request_headers.get("content-length", ""))  # step 3
        if raw is None:
            return _TOO_LARGE
        return await verify_and_ingest(state, scope, ip, trigger, raw)
    except _DB_ERRORS as exc:
        log.warning("ingress answered 503", extra={"error": exc.__class__.__name__})
        return _UNAVAILABLE


class HookEndpoint:
    """The webhook endpoint as a plain ASGI app rather than a request handler.

    Starlette's router still matches it (and answers 405 for other methods), but the hot path skips its
    request and response objects and their exception wrappers, about half of the framework's cost per
    request (docs/BENCHMARKS.md).
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one ``POST`` (or handshake ``GET``) ``/hooks/{token}``."""
        await (await answer(scope, receive))(send)


routes = [Route("/hooks/{token:path}", HookEndpoint(), methods=["POST", "GET"])]
