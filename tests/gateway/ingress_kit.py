"""Shared setup for the ingress tests: a workspace with a webhook trigger, provider signers, row readers."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx

from gateway.app import create_app
from hookgate.context import Context, open_context
from tests import factories
from tests.conftest import make_settings

GITHUB_SECRET = "It's a Secret to Everybody"


@dataclass
class Hook:
    """One webhook trigger ready to receive: its token, path, row and autopilot."""

    w: factories.World
    autopilot: asyncpg.Record
    trigger: asyncpg.Record
    token: str

    @property
    def path(self) -> str:
        """The ingress path of the trigger."""
        return f"/hooks/{self.token}"


async def hook(ctx: Context, provider: str = "github", secret: str | None = GITHUB_SECRET, *,
               mode: str = "run_only", pull: bool = False, **kw: Any) -> Hook:
    """A workspace, an agent (http unless ``pull``), an autopilot and a webhook trigger on it."""
    s = await factories.small(ctx, kw.pop("workspace", "acme"), pull=pull, mode=mode, provider=provider,
                              secret=secret, **kw)
    return Hook(s.world, s.autopilot, s.trigger, s.token)


def github(body: dict[str, Any] | bytes, secret: str = GITHUB_SECRET, event: str = "issues",
           delivery: str | None = None) -> tuple[bytes, dict[str, str]]:
    """A GitHub-style signed request: ``(raw body, headers)``."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    signature = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    return raw, {
        "content-type": "application/json", "x-github-event": event,
        "x-github-delivery": delivery or str(uuid.uuid4()), "x-hub-signature-256": signature,
    }


async def post_github(client: httpx.AsyncClient, h: Hook, body: dict[str, Any] | bytes,
                      **signing: Any) -> httpx.Response:
    """POST ``body`` to ``h`` signed as :func:`github` signs it (its other arguments in ``signing``)."""
    raw, headers = github(body, **signing)
    return await client.post(h.path, content=raw, headers=headers)


async def deliveries(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """Every delivery, oldest first."""
    return await conn.fetch("SELECT * FROM webhook_delivery ORDER BY received_at, id")


async def runs(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """Every run, oldest first."""
    return await conn.fetch("SELECT * FROM autopilot_run ORDER BY created_at, id")


def stripe_signed(body: dict[str, Any], secret: str, ts: int | None = None) -> tuple[bytes, dict[str, str]]:
    """A Stripe event signed by the stripe SDK's own helper."""
    import stripe

    raw = json.dumps(body).encode()
    header = stripe.WebhookSignature.generate_signature_header(raw.decode(), secret, ts or int(time.time()))
    return raw, {"content-type": "application/json", "stripe-signature": header}


def slack_signed(body: dict[str, Any], secret: str, ts: int | None = None) -> tuple[bytes, dict[str, str]]:
    """A Slack Events API request signed by slack_sdk's SignatureVerifier."""
    from slack_sdk.signature import SignatureVerifier

    raw = json.dumps(body).encode()
    stamp = str(ts or int(time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=raw)
    assert signature is not None
    return raw, {"content-type": "application/json", "x-slack-request-timestamp": stamp,
                 "x-slack-signature": signature}


def standard_signed(body: dict[str, Any], secret: str, msg_id: str = "msg_1") -> tuple[bytes, dict[str, str]]:
    """A Standard Webhooks request signed by the standardwebhooks SDK."""
    import standardwebhooks

    raw = json.dumps(body).encode()
    now = datetime.now(UTC)
    signature = standardwebhooks.Webhook(secret).sign(msg_id, now, raw.decode())
    return raw, {"content-type": "application/json", "webhook-id": msg_id,
                 "webhook-timestamp": str(int(now.timestamp())), "webhook-signature": signature}


@contextlib.asynccontextmanager
async def app_client(db_url: str, **overrides: Any) -> AsyncIterator[tuple[Context, httpx.AsyncClient]]:
    """A context with settings overrides and an ASGI client (peer 203.0.113.7) over a fresh app."""
    async with open_context(make_settings(db_url, **overrides), migrate=False) as ctx:
        transport = httpx.ASGITransport(app=create_app(ctx), client=("203.0.113.7", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://hooks.test") as http:
            yield ctx, http


async def asgi_post(app: Any, path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]],
                    client: tuple[str, int] = ("203.0.113.7", 40000)) -> tuple[int, bytes, int]:
    """POST through the raw ASGI interface; returns (status, body, how many body chunks the app read)."""
    reads = 0
    pending = list(chunks)

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        chunk = pending.pop(0) if pending else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"hooks.test"), *headers], "client": client, "server": ("hooks.test", 80)}
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body, reads
