"""One per-IP bad-credential debt for every door: webhook tokens, admin keys, runtime tokens, dashboard logins.

Past the cap an address gets 429 + Retry-After, even with a valid credential, before its credential is looked
up; another address is not affected, and a valid credential never adds to it.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from autopilot import workspaces
from gateway.app import create_app, shutdown
from gateway.sessions import SESSION_COOKIE
from hookgate.context import Context, open_context
from tests import factories
from tests.conftest import make_settings
from tests.factories import bearer
from tests.gateway import ingress_kit as kit
from tests.ops.conftest import CSRF, log_in

GUESSER, BYSTANDER = "203.0.113.7", "198.51.100.9"


async def test_thirty_unknown_tokens_then_429_even_for_a_valid_token_from_that_ip(db_url):
    async with kit.app_client(db_url) as (ctx, client):
        hook = await kit.hook(ctx)
        raw, headers = kit.github({"action": "opened"})
        for n in range(30):
            guess = await client.post(f"/hooks/awt_{secrets.token_urlsafe(32)}", content=raw, headers=headers)
            assert guess.status_code == 404, n
        blocked = await client.post(f"/hooks/awt_{secrets.token_urlsafe(32)}", content=raw, headers=headers)
        assert blocked.status_code == 429 and blocked.json()["error"] == "rate_limited"
        assert int(blocked.headers["retry-after"]) >= 1
        valid = await client.post(hook.path, content=raw, headers=headers)
        assert valid.status_code == 429
        async with ctx.pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM webhook_delivery") == 0


async def test_bad_signatures_count_as_misses_too(db_url):
    async with kit.app_client(db_url) as (ctx, client):
        hook = await kit.hook(ctx)
        for _ in range(30):
            guessed = await kit.post_github(client, hook, {"action": "opened"}, secret="guess")
            assert guessed.status_code == 401
        assert (await kit.post_github(client, hook, {"action": "opened"})).status_code == 429


@dataclass
class Pair:
    """One app (one set of gates) reached from two addresses: the guesser's and a bystander's."""

    ctx: Context
    guesser: httpx.AsyncClient
    bystander: httpx.AsyncClient


@contextlib.asynccontextmanager
async def pair(db_url: str, **overrides: Any) -> AsyncIterator[Pair]:
    """A fresh app with settings ``overrides``, and a client from each of two addresses; shut down after."""
    async with open_context(make_settings(db_url, **overrides), migrate=False) as ctx:
        app = create_app(ctx)
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app, client=(ip, 40000)), base_url="http://hooks.test"))
                for ip in (GUESSER, BYSTANDER)]
            yield Pair(ctx, *clients)
        await shutdown(app)


def assert_in_debt(answer: httpx.Response) -> None:
    """The answer of an address over its bad-credential cap: 429 with a Retry-After in whole seconds."""
    assert answer.status_code == 429, answer.text
    assert int(answer.headers["retry-after"]) >= 1


async def assert_webhook_refused(client: httpx.AsyncClient) -> None:
    """The debt is one per address: the webhook ingress refuses the address too."""
    raw, headers = kit.github({"action": "opened"})
    assert (await client.post("/hooks/awt_" + "x" * 43, content=raw, headers=headers)).status_code == 429


async def test_bad_admin_keys_charge_the_debt_until_429_even_for_a_valid_key_before_it_is_looked_up(db_url):
    async with pair(db_url, ip_bad_credential_cap=4) as p:
        w = await factories.world(p.ctx)
        guesses = [bearer("hgk_" + secrets.token_urlsafe(32)), bearer("hgk_short"), {"Authorization": "Basic x"}, {}]
        for headers in guesses:
            answer = await p.guesser.get("/v1/autopilots", headers=headers)
            assert answer.status_code == 401 and answer.json()["error"] == "unauthorized", headers
        blocked = await p.guesser.get("/v1/autopilots", headers=w.auth)
        assert_in_debt(blocked)
        assert blocked.json()["error"] == "rate_limited"
        # Refused before the lookup: the key's last use (stamped by every lookup that finds it) is still unset.
        assert await p.ctx.pool.fetchval("SELECT last_used_at FROM api_key") is None
        await assert_webhook_refused(p.guesser)
        assert (await p.bystander.get("/v1/autopilots", headers=w.auth)).status_code == 200


async def test_bad_runtime_tokens_charge_the_debt_until_429_even_for_a_valid_token(db_url):
    async with pair(db_url, ip_bad_credential_cap=4) as p:
        w = await factories.world(p.ctx)
        runtime = await factories.pull_agent(w)
        task = "/v1/runtime/tasks/00000000-0000-4000-8000-000000000000/renew"
        guesses = [("/v1/runtime/heartbeat", bearer("hgr_" + secrets.token_urlsafe(32))),
                   ("/v1/runtime/claim", bearer("hgk_not-a-runtime-token")),
                   ("/v1/runtime/heartbeat", {}),
                   (task, bearer("hgr_" + secrets.token_urlsafe(32)))]
        for path, headers in guesses:
            answer = await p.guesser.post(path, json={}, headers=headers)
            assert answer.status_code == 401 and answer.json()["error"] == "unauthorized", path
        valid = bearer(runtime.runtime_token)
        assert_in_debt(await p.guesser.post("/v1/runtime/heartbeat", json={"instance": "guessed"}, headers=valid))
        assert await p.ctx.pool.fetchval("SELECT count(*) FROM agent_instance") == 0
        await assert_webhook_refused(p.guesser)
        answer = await p.bystander.post("/v1/runtime/heartbeat", json={"instance": "box"}, headers=valid)
        assert answer.status_code == 200 and answer.json()["status"] == "online"


async def _login(client: httpx.AsyncClient, api_key: str) -> httpx.Response:
    page = await client.get("/dashboard/login")
    found = CSRF.search(page.text)
    assert found, page.text
    return await client.post("/dashboard/login", data={"api_key": api_key, "csrf": found.group(1)})


async def test_bad_dashboard_logins_charge_the_debt_until_429_even_for_the_right_key(db_url):
    async with pair(db_url, ip_bad_credential_cap=3) as p:
        w = await factories.world(p.ctx)
        for key in ("hgk_" + secrets.token_urlsafe(32), "not a key", ""):
            wrong = await _login(p.guesser, key)
            assert wrong.status_code == 401 and "not valid" in wrong.text, key
        blocked = await _login(p.guesser, w.api_key)
        assert_in_debt(blocked)
        assert "Too many" in blocked.text and SESSION_COOKIE not in blocked.headers.get("set-cookie", "")
        assert await p.ctx.pool.fetchval("SELECT last_used_at FROM api_key") is None
        assert_in_debt(await p.guesser.get("/v1/autopilots", headers=w.auth))
        await log_in(p.bystander, w.api_key)


async def test_valid_credentials_never_add_to_the_debt(db_url):
    async with pair(db_url, ip_bad_credential_cap=1) as p:
        w = await factories.world(p.ctx)
        runtime = await factories.pull_agent(w)
        async with p.ctx.pool.acquire() as conn:
            _, member_key = await workspaces.add_member(conn, w.workspace_id, "viewer", "member")
        for _ in range(3):
            missing = await p.guesser.get("/v1/runs/00000000-0000-4000-8000-000000000000", headers=w.auth)
            assert missing.status_code == 404
            forbidden = await p.guesser.post("/v1/members", json={"name": "x", "role": "member"},
                                             headers=bearer(member_key))
            assert forbidden.status_code == 403
            renew = await p.guesser.post("/v1/runtime/tasks/00000000-0000-4000-8000-000000000000/renew",
                                         json={}, headers=bearer(runtime.runtime_token))
            assert renew.status_code == 404
            await log_in(p.guesser, w.api_key)
        assert (await p.guesser.get("/v1/autopilots", headers=w.auth)).status_code == 200
        answer = await p.guesser.post("/v1/runtime/heartbeat", json={}, headers=bearer(runtime.runtime_token))
        assert answer.status_code == 200
