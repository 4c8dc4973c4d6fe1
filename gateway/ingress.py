"""``POST /hooks/{token}``: the twelve steps of DESIGN §4, in that order.

1 IP gates (:mod:`gateway.ratelimit`) · 2 token lookup by digest (:mod:`gateway.ingress_triggers`) ·
3 256 KiB cap while streaming · 4 trigger/autopilot/workspace cross-check · 5 envelope
(:mod:`gateway.envelope`) · 6 event, dedupe key and signature (:mod:`gateway.providers`) · 7-10, 12
persist, reject, ignore, admit, answer (:mod:`gateway.ingress_store`, written with concurrent requests
in one commit by :mod:`gateway.ingress_batch`) · 11 wake the worker
(:mod:`gateway.ingress_wake`).

Every miss (malformed, unknown, rotated, schedule or deleted trigger, workspace mismatch) is the same
404 bytes. The body of an unknown token is never read. No 2xx leaves before its commit; if the database
is unreachable, a connection cannot be had in ``pool_acquire_timeout`` or the write fails, the answer is
503 with ``Retry-After`` so the provider retries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway import ingress_store as store
from gateway import ratelimit
from gateway.envelope import BodyError, build_envelope, parse_body
from gateway.ingress_batch import IngestBatcher
from gateway.ingress_triggers import Trigger, TriggerCache, lookup
from gateway.ingress_wake import Waker
from gateway.providers import Inbound, get_preset, selected_headers, slack_challenge
from hookgate import crypto, logs
from hookgate.context import Context

log = logging.getLogger("hookgate.ingress")

BODY_CAP = 256 * 1024
RETRY_AFTER_UNAVAILABLE_S = 5
TOKEN_PREFIX = "awt_"
_JSON = "application/json"
NOT_FOUND = b'{"error":"not_found","message":"not found"}'
TOO_LARGE = b'{"error":"payload_too_large","message":"the body is larger than 256 KiB"}'
UNAVAILABLE = b'{"error":"unavailable","message":"the database is unavailable; retry later"}'
# InternalClientError: asyncpg's pool can raise it when releasing a connection the server just killed.
_DB_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError,
              crypto.DecryptError)


@dataclass
class IngressState:
    """Per-app state of the ingress: the context, the IP gates, the lookup cache and the worker waker."""

    ctx: Context
    gates: ratelimit.RateGates
    cache: TriggerCache
    waker: Waker
    writer: IngestBatcher

    @classmethod
    def create(cls, ctx: Context) -> IngressState:
        """Fresh gates, cache, waker and batch writer for an app over ``ctx``."""
        s = ctx.settings
        waker = Waker(ctx.pool, s.pool_acquire_timeout)
        writer = IngestBatcher(ctx.pool, s.pool_acquire_timeout, size=s.ingest_batch_max, inflight=s.ingest_inflight)
        return cls(ctx, ratelimit.RateGates(s), TriggerCache(), waker, writer)


def ingress_state(request: Request) -> IngressState:
    """The app's ingress state, created on first use (tests may install their own beforehand)."""
    state: IngressState | None = getattr(request.app.state, "ingress", None)
    if state is None:
        state = request.app.state.ingress = IngressState.create(request.app.state.ctx)
    return state


def _raw(status: int, body: bytes, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type=_JSON, headers=headers)


def _unavailable() -> Response:
    return _raw(503, UNAVAILABLE, {"Retry-After": str(RETRY_AFTER_UNAVAILABLE_S)})


def _headers(request: Request) -> dict[str, str]:
    # Lower-cased names; NULs dropped because PostgreSQL text cannot hold them.
    return {k.decode("latin-1"): v.decode("latin-1").replace("\x00", "") for k, v in request.scope["headers"]}


async def _read_capped(request: Request) -> bytes | None:
    """Step 3: the whole body, or None as soon as it passes the cap (whatever Content-Length said)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > BODY_CAP:
        return None
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > BODY_CAP:
                return None
            chunks.append(chunk)
    except ClientDisconnect:
        return b""  # the sender is gone; an empty body is refused as invalid and nothing is stored
    return b"".join(chunks)


async def _lookup(state: IngressState, digest: bytes, cached: bool) -> Trigger | None:
    if cached and (hit := state.cache.get(digest)) is not None:
        return hit  # no connection taken at all
    async with state.ctx.pool.acquire(timeout=state.ctx.settings.pool_acquire_timeout) as conn:
        return await lookup(conn, state.ctx.keyring, digest, state.cache,
                            heartbeat_timeout_s=state.ctx.settings.heartbeat_timeout_s)


def _verify(request: Request, trigger: Trigger, raw: bytes, headers: dict[str, str],
            payload: dict[str, object] | list[object]) -> tuple[store.Delivery, Inbound]:
    """Step 6 (and the envelope of step 5): event, dedupe key, signature, selected headers."""
    preset = get_preset(trigger.provider)
    query = request.scope.get("query_string", b"").decode("latin-1")
    url = request.app.state.ctx.settings.public_url.rstrip("/") + request.url.path + (f"?{query}" if query else "")
    now = trigger.now()
    inbound = Inbound(raw=raw, headers=headers, body=payload, url=url, now=now)
    event = preset.event(inbound)
    key, source = preset.dedupe_key(inbound)
    received_at = datetime.fromtimestamp(now, UTC)
    content_type = headers.get("content-type")
    delivery = store.Delivery(
        received_at=received_at, raw=raw, content_type=content_type,
        headers=selected_headers(preset, headers), event=event, dedupe_key=key, dedupe_source=source,
        envelope=build_envelope(event, payload, received_at, content_type),
        signature=preset.verify(inbound, trigger.secrets),
    )
    return delivery, inbound


async def _steps_4_to_12(request: Request, state: IngressState, ip: str, trigger: Trigger,
                         raw: bytes) -> Response:
    if not trigger.consistent:  # step 4
        state.gates.charge(ip)
        return _raw(404, NOT_FOUND)
    headers = _headers(request)
    try:  # step 5
        payload = parse_body(raw, headers.get("content-type"))
        if (why := store.unstorable(raw, payload)) is not None:
            raise BodyError(why)
    except BodyError as exc:
        status = 415 if exc.code == "unsupported_media_type" else 400
        return JSONResponse({"error": exc.code, "message": exc.detail, "detail": exc.detail}, status_code=status)
    for attempt in range(2):
        delivery, inbound = _verify(request, trigger, raw, headers, payload)  # step 6
        if trigger.provider == "slack" and delivery.signature in ("valid", "not_required"):
            challenge = slack_challenge(inbound)
            if challenge is not None:
                return JSONResponse({"challenge": challenge})
        try:
            answer = await store.store(state.writer, trigger, delivery)  # steps 7-12
        except store.Stale:
            state.cache.drop(trigger.digest)
            if attempt:
                break  # changed again under us: the provider retries shortly
            fresh = await _lookup(state, trigger.digest, cached=False)
            if fresh is None or not fresh.consistent:
                state.gates.charge(ip)
                return _raw(404, NOT_FOUND)
            trigger = fresh
            continue
        if answer.charge:
            state.gates.charge(ip)
        if answer.wake is not None:
            state.waker.wake(answer.wake)  # step 11, after the commit
        logs.bind(outcome=answer.body.get("status"), delivery_id=answer.body.get("delivery_id"),
                  run_id=answer.body.get("run_id"))  # access log, ingress metrics (gateway.access)
        return JSONResponse(answer.body, status_code=answer.status)
    return _unavailable()


async def receive_hook(request: Request) -> Response:
    """The webhook endpoint; see the module docstring for the order of the steps."""
    state = ingress_state(request)
    peer = request.client.host if request.client else None
    ip = ratelimit.client_ip(peer, request.headers, state.gates.trusted)
    if (wait := state.gates.admit(ip)) is not None:  # step 1
        return JSONResponse({"error": "rate_limited", "message": "too many requests from this address"},
                            status_code=429, headers={"Retry-After": str(wait)})
    token = request.path_params["token"]
    if not crypto.token_shape_ok(token, TOKEN_PREFIX):  # step 2, without a query
        state.gates.charge(ip)
        return _raw(404, NOT_FOUND)
    try:
        trigger = await _lookup(state, crypto.digest(token), cached=True)
        if trigger is None:
            state.gates.charge(ip)
            return _raw(404, NOT_FOUND)
        logs.bind(trigger_id=str(trigger.id), preset=trigger.provider)
        raw = await _read_capped(request)  # step 3
        if raw is None:
            return _raw(413, TOO_LARGE)
        return await _steps_4_to_12(request, state, ip, trigger, raw)
    except _DB_ERRORS as exc:
        log.warning("ingress answered 503", extra={"error": exc.__class__.__name__})
        return _unavailable()


routes = [Route("/hooks/{token:path}", receive_hook, methods=["POST"])]
