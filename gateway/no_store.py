"""No cache keeps an API answer: every response under ``/v1/`` says ``Cache-Control: no-store``.

The admin and runtime APIs answer workspace data and, on create and rotate, credentials shown once (API
keys, signing secrets, runtime and webhook tokens; a claim's lease token), and a trigger's writers get its
webhook URL on every read. A browser's disk cache or a proxy must keep none of them, so the rule holds for
the whole prefix, errors included, and a new endpoint cannot forget it. The dashboard sends the same header
on its pages (:data:`gateway.dashboard.web.SECURITY_HEADERS`); ``/openapi.json`` and the ingress are not marked.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

API_PREFIX = "/v1/"
_NO_STORE = (b"cache-control", b"no-store")


class NoStore:
    """ASGI middleware: answers under :data:`API_PREFIX` get ``Cache-Control: no-store`` (replacing any other)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Mark an API request's answer; any other request passes through untouched."""
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [h for h in message.get("headers", []) if h[0].lower() != b"cache-control"]
                message["headers"] = [*kept, _NO_STORE]
            await send(message)

        await self.app(scope, receive, marked)
