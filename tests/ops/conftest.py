"""Fixtures for the operations tests: a small world, scrapes parsed into samples, a proxy to cut."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autopilot import admission
from hookgate.context import Context
from tests import factories
from tests.chaos.proxy import TcpProxy
from tests.chaos.test_proxy import proxy_target
from tests.factories import Small
from tests.factories import small as make_small


@pytest.fixture
async def small(ctx: Context) -> Small:
    """A workspace with one HTTP agent, one run_only autopilot and one webhook trigger."""
    return await make_small(ctx)


async def admit_runs(ctx: Context, small: Small, count: int) -> list[Any]:
    """Admit ``count`` api runs (pending: nobody dispatches them in these tests)."""
    async with ctx.pool.acquire() as conn:
        return [(await admission.admit(conn, autopilot_id=small.autopilot["id"], source="api", payload={},
                                       heartbeat_timeout_s=120.0)).run_id
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


@pytest.fixture
def db_proxy(server_url: str, db_url: str) -> Iterator[tuple[TcpProxy, str]]:
    """A cuttable proxy to this test's database; yields ``(proxy, database URL through the proxy)``."""
    host, port, parts = proxy_target(server_url)
    proxy = TcpProxy(host, port)
    local = proxy.start()
    name = urlsplit(db_url).path
    url = parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{local}", path=name).geturl()
    try:
        yield proxy, url
    finally:
        proxy.stop()


async def insert_delivery(ctx: Context, small: Small, *, status: str = "queued", event: str = "push",
                          reason_code: str | None = None) -> Any:
    """A delivery row as ingress writes it (for views that only read deliveries)."""
    return await factories.delivery(
        ctx.pool, small.trigger, body=b"{}", content_type="application/json", event=event, status=status,
        signature_status="invalid" if status == "rejected" else "not_required", reason_code=reason_code,
        envelope={"event": event, "payload": {}})


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
