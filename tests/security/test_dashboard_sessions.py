"""Logging out of the dashboard ends the session on the server: its cookie, replayed, is refused at once.

Sessions are rows in the database (only a digest of each session's id), so a logout on one gateway process is
seen by every other at their next request, and it ends only the session that logged out.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.app import create_app, shutdown
from gateway.sessions import SESSION_COOKIE
from hookgate.context import Context
from tests.factories import Small
from tests.ops.conftest import log_in, make_small


@pytest.fixture
async def small(ctx: Context) -> Small:
    return await make_small(ctx)


@contextlib.asynccontextmanager
async def browsers(ctx: Context, gateways: int) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two browsers, each with its own cookie jar: on one gateway app, or each on its own (sharing the database)."""
    apps = [create_app(ctx) for _ in range(gateways)]
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(httpx.AsyncClient(
            transport=httpx.ASGITransport(app=apps[n % gateways], client=("203.0.113.7", 40000)),
            base_url="http://hooks.test")) for n in range(2)]
    for app in apps:
        await shutdown(app)


def session_cookie(client: httpx.AsyncClient) -> str:
    """The client's session cookie."""
    cookie = client.cookies.get(SESSION_COOKIE, path="/dashboard")
    assert cookie
    return cookie


def replay(client: httpx.AsyncClient, cookie: str) -> None:
    """Put ``cookie`` back in the client's jar, as an attacker who kept a copy would."""
    client.cookies.set(SESSION_COOKIE, cookie, domain="hooks.test", path="/dashboard")


async def log_out(client: httpx.AsyncClient, csrf: str) -> None:
    """The logout form."""
    answer = await client.post("/dashboard/logout", data={"csrf": csrf})
    assert answer.status_code == 303 and answer.headers["location"] == "/dashboard/login"


async def test_a_cookie_replayed_after_logout_is_refused(client: httpx.AsyncClient, small: Small):
    csrf = await log_in(client, small.world.api_key)
    kept = session_cookie(client)
    await log_out(client, csrf)
    replay(client, kept)
    page = await client.get("/dashboard")
    assert page.status_code == 303 and page.headers["location"] == "/dashboard/login"
    write = await client.post(f"/dashboard/autopilots/{small.autopilot['id']}/pause",
                              data={"csrf": csrf, "confirmed": "yes"})
    assert write.status_code == 401
    assert (await client.post("/dashboard/logout", data={"csrf": csrf})).status_code == 401


async def test_a_logout_on_one_gateway_ends_the_session_on_another(ctx: Context, small: Small):
    async with browsers(ctx, gateways=2) as (first, second):
        csrf = await log_in(first, small.world.api_key)
        replay(second, session_cookie(first))
        assert (await second.get("/dashboard")).status_code == 200
        await log_out(second, csrf)
        assert (await first.get("/dashboard")).status_code == 303


async def test_a_logout_ends_only_its_own_session(ctx: Context, small: Small):
    async with browsers(ctx, gateways=1) as (leaving, staying):
        await log_in(staying, small.world.api_key)
        await log_out(leaving, await log_in(leaving, small.world.api_key))
        assert (await staying.get("/dashboard")).status_code == 200
        assert (await leaving.get("/dashboard")).status_code == 303


async def test_the_database_holds_only_a_digest_of_the_session_id(ctx: Context, client: httpx.AsyncClient,
                                                                  small: Small):
    await log_in(client, small.world.api_key)
    body = session_cookie(client).split(".")[0]
    nonce = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["n"]
    rows = [dict(r) for r in await ctx.pool.fetch("SELECT * FROM dashboard_session")]
    assert len(rows) == 1 and rows[0]["digest"] == hashlib.sha256(nonce.encode()).digest()
    assert nonce not in repr(rows) and nonce.encode() not in rows[0]["digest"]
