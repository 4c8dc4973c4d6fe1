"""Shared setup for the ingress tests: a workspace with a webhook trigger, provider signers, row readers."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from hookgate.context import Context
from tests import factories

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
    w = await factories.world(ctx, kw.pop("workspace", "acme"))
    agent = await (factories.pull_agent(w) if pull else factories.http_agent(w))
    ap = await factories.autopilot(w, agent.row["id"], mode=mode)
    trigger, token = await factories.webhook_trigger(w, ap, provider=provider, secret=secret, **kw)
    return Hook(w, ap, trigger, token)


def github(body: dict[str, Any] | bytes, secret: str = GITHUB_SECRET, event: str = "issues",
           delivery: str | None = None) -> tuple[bytes, dict[str, str]]:
    """A GitHub-style signed request: ``(raw body, headers)``."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    signature = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    return raw, {
        "content-type": "application/json", "x-github-event": event,
        "x-github-delivery": delivery or str(uuid.uuid4()), "x-hub-signature-256": signature,
    }


async def deliveries(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """Every delivery, oldest first."""
    return await conn.fetch("SELECT * FROM webhook_delivery ORDER BY received_at, id")


async def runs(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """Every run, oldest first."""
    return await conn.fetch("SELECT * FROM autopilot_run ORDER BY created_at, id")
