"""Request ids, the access log and ingress request metrics, as one ASGI middleware around the app.

Each request gets an id (a well-formed incoming ``X-Request-Id`` is kept, so a balancer's id follows
the request; otherwise a new one), echoed in the response and bound to every log record written while
the request runs. Handlers add what they learn (``logs.bind(trigger_id=…, delivery_id=…, run_id=…,
preset=…, outcome=…)``). One access line per request is written at the end, with the ``/hooks/<token>``
path replaced by ``/hooks/awt_[redacted]``: the token is the credential, so it never reaches a log. Its
``client_ip`` is the client address as the rate gates see it (:func:`gateway.ratelimit.client_address`).
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import ratelimit
from hookgate import logs, metrics

log = logging.getLogger("hookgate.access")

HOOKS_PREFIX = "/hooks/"
REDACTED_HOOK_PATH = "/hooks/awt_[redacted]"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{8,128}$")

# Ingress outcome when the handler did not bind one (errors answered before or outside its code).
_OUTCOME_BY_STATUS = {
    200: "ok", 400: "invalid_body", 401: "rejected", 404: "not_found", 405: "method_not_allowed",
    413: "payload_too_large", 415: "unsupported_media_type", 429: "rate_limited", 500: "error",
    503: "unavailable",
}

# The ingress metrics' labelled series by (outcome, preset): ``labels()`` takes a lock and builds a key.
_SERIES: dict[tuple[str, str], tuple[Any, Any]] = {}


def redacted_path(path: str) -> str:
    """The path as it may be logged: anything after ``/hooks/`` is a credential, whatever its shape."""
    if path.startswith(HOOKS_PREFIX):
        return REDACTED_HOOK_PATH
    return logs.redact(path)


def client_ip(scope: Scope) -> str | None:
    """The request's client address: the peer, or what a trusted proxy forwarded (as the gates see it)."""
    client = scope.get("client")
    ctx = getattr(getattr(scope.get("app"), "state", None), "ctx", None)
    trusted = ratelimit.networks(tuple(ctx.settings.trusted_proxies)) if ctx is not None else ()
    addr = ratelimit.client_address(client[0] if client else None, Headers(scope=scope), trusted)
    return str(addr) if addr is not None else None


def request_id_from(scope: Scope) -> str:
    """The caller's ``X-Request-Id`` if it is a plain token of sane length, else a new random id."""
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text: str = value.decode("latin-1")
            if _REQUEST_ID.match(text) and logs.redact(text) == text:
                return text
    return os.urandom(16).hex()


class RequestContext:
    """ASGI middleware: request id in and out, a log scope per request, an access line, ingress metrics."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wrap one HTTP request; other scope types pass through."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        with logs.scope(request_id=request_id) as fields:
            try:
                await self.app(scope, receive, send_with_id)
            except Exception:
                # Logged here, inside the request's scope, so the traceback carries the request id;
                # Starlette's outermost error middleware then answers the bare JSON 500.
                status = 500
                route = scope.get("route")
                log.exception("unhandled error", extra={"path_template": getattr(route, "path", "?")})
                raise
            finally:
                _finish(scope, fields, status, time.perf_counter() - started)


def _finish(scope: Scope, fields: dict[str, object], status: int, elapsed: float) -> None:
    path = scope.get("path", "")
    if log.isEnabledFor(logging.INFO):  # at warning level (benchmarks, quiet installs) build nothing
        log.info("request", extra={
            "method": scope.get("method"), "path": redacted_path(path), "status": status,
            "duration_ms": round(elapsed * 1000, 2), "client_ip": client_ip(scope),
        })
    if path.startswith(HOOKS_PREFIX):
        outcome = str(fields.get("outcome") or _OUTCOME_BY_STATUS.get(status, str(status)))
        preset = str(fields.get("preset") or "unknown")
        series = _SERIES.get((outcome, preset))
        if series is None:  # a few dozen pairs at most (outcomes x presets): looked up once, kept
            series = _SERIES[outcome, preset] = (metrics.INGRESS_REQUESTS.labels(outcome, preset),
                                                 metrics.INGRESS_LATENCY.labels(outcome))
        series[0].inc()
        series[1].observe(elapsed)
