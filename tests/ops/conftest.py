"""Fixtures for the operations tests: a small world, scrapes parsed into samples, a TCP proxy to cut."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autopilot import admission
from hookgate.context import Context
from tests import factories


@dataclass
class Small:
    """A workspace with one HTTP agent, one run_only autopilot and one webhook trigger."""

    world: factories.World
    agent: Any
    autopilot: Any
    trigger: Any
    token: str


@pytest.fixture
async def small(ctx: Context) -> Small:
    w = await factories.world(ctx)
    agent = await factories.http_agent(w)
    pilot = await factories.autopilot(w, agent.row["id"])
    trigger, token = await factories.webhook_trigger(w, pilot)
    return Small(w, agent, pilot, trigger, token)


async def admit_runs(ctx: Context, small: Small, count: int) -> list[Any]:
    """Admit ``count`` api runs (pending: nobody dispatches them in these tests)."""
    async with ctx.pool.acquire() as conn:
        return [(await admission.admit(conn, autopilot_id=small.autopilot["id"], source="api", payload={})).run_id
                for _ in range(count)]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A scrape as ``{(sample name, sorted labels): value}``."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def scrape(http: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics and parse it."""
    answer = await http.get("/metrics")
    assert answer.status_code == 200, answer.text
    return samples(answer.text)


@dataclass
class Proxy:
    """A TCP proxy in front of PostgreSQL that a test can cut (drop every connection, refuse new ones)."""

    target: tuple[str, int]
    server: asyncio.Server | None = None
    port: int = 0
    links: set[asyncio.StreamWriter] = field(default_factory=set)
    open: bool = True

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.links |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
        self.links.discard(writer)

    def cut(self) -> None:
        """Refuse new connections and close every open one (the database 'goes down')."""
        self.open = False
        for writer in list(self.links):
            writer.close()

    def restore(self) -> None:
        """Accept connections again (the database 'comes back')."""
        self.open = True

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def db_proxy(db_url: str) -> AsyncIterator[tuple[Proxy, str]]:
    """A cuttable proxy to this test's database; yields ``(proxy, database URL through the proxy)``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(db_url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    await proxy.start()
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    netloc = f"{userinfo}127.0.0.1:{proxy.port}"
    try:
        yield proxy, urlunsplit(parts._replace(netloc=netloc))
    finally:
        await proxy.close()


async def insert_delivery(ctx: Context, small: Small, *, status: str = "queued", event: str = "push",
                          reason_code: str | None = None) -> Any:
    """A delivery row as ingress writes it (for views that only read deliveries)."""
    signature = "invalid" if status == "rejected" else "not_required"
    async with ctx.pool.acquire() as conn:
        return await conn.fetchval(
            "INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, body, content_type, provider,"
            " event, signature_status, status, reason_code, envelope)"
            " VALUES ($1, $2, $3, '{}'::bytea, 'application/json', 'generic', $4, $5, $6, $7, $8) RETURNING id",
            small.world.workspace_id, small.trigger["id"], small.autopilot["id"], event, signature, status,
            reason_code, {"event": event, "payload": {}},
        )


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


async def log_in(http: httpx.AsyncClient, api_key: str) -> str:
    """Log in through the form; returns the session's CSRF token (read from the overview page)."""
    page = await http.get("/dashboard/login")
    token = CSRF.search(page.text)
    assert token, page.text
    answer = await http.post("/dashboard/login", data={"api_key": api_key, "csrf": token.group(1)})
    assert answer.status_code == 303 and answer.headers["location"] == "/dashboard", answer.text
    overview = await http.get("/dashboard")
    assert overview.status_code == 200
    found = CSRF.search(overview.text)
    assert found
    return found.group(1)
