"""The self-loop guard: no agent or notification channel may push into the gateway's own ``/hooks/``.

A URL's path is compared as the gateway's router will see it: the request line aiohttp sends (yarl decodes
unreserved escapes and removes dot segments), percent-decoded by uvicorn, matched by Starlette. Each spelling
below reached the webhook ingress before the guard compared paths that way (``ROUTED``), or would through a
proxy that normalises more than our own server does (``NORMALISED``). The gateway's address is allowed
(loopback, as ``serve`` on the embedded database allows it), so only the path guard stands in the way.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import aiohttp
import pytest
import yarl
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from starlette.routing import Match

from gateway.ingress.endpoint import routes as ingress_routes
from hookgate import egress
from hookgate.context import Context
from tests import factories
from tests.conftest import make_settings, serving
from tests.processes import free_port
from tests.security.test_egress import LOOPBACK, gateway, push_once
from worker.alerts import AlertSender

#: Spellings the gateway's own server routes to its webhook ingress (``{t}`` is a trigger's token).
ROUTED = [
    "/hook%73/{t}", "/%68ooks/{t}", "/%68%6F%6F%6B%73/{t}", "/hooks%2F{t}", "/hooks%2f{t}",
    "/%2e%2e/hooks/{t}", "/%2E%2E/hooks/{t}", "/%2e/hooks/{t}", "/.%2e/hooks/{t}", "/x/%2e%2e/hooks/{t}",
    "/x%2Fy/%2e%2e/hooks/{t}", "/./hooks/{t}", "/x/../hooks/{t}", "/x;p/../hooks/{t}",
]
#: Spellings our server does not route but a proxy in front of it may normalise into ``/hooks/``.
NORMALISED = [
    "/HOOKS/{t}", "/Hook%73/{t}", "//hooks/{t}", "/hooks;a=b/{t}", "/hooks;/{t}", "/hooks%3B/{t}",
    "/x%2F..%2Fhooks/{t}", "/..%2Fhooks/{t}",
    "/%2Fhooks/{t}", "/hooks%252F{t}", "/%252e%252e/hooks/{t}", "/hooks%5C{t}", "/hooks\\{t}",
]
#: Paths on the gateway's own host and port that are not its ingress: still allowed.
ELSEWHERE = ["/agent", "/hooksmith/{t}", "/x/hooks/{t}", "/%2e%2e/agent", "/hook/{t}"]
TOKEN = "awt_" + "A" * 43


def routed_to_ingress(url: str) -> bool:
    """Whether the gateway's own server hands a POST to ``url`` to its webhook ingress.

    The path on the request line is aiohttp's (yarl); uvicorn percent-decodes it; the ingress route matches.
    """
    scope = {"type": "http", "method": "POST", "root_path": "",
             "path": urllib.parse.unquote(yarl.URL(url).raw_path)}
    return ingress_routes[0].matches(scope)[0] is Match.FULL


async def _create_agent(http: Any, auth: dict[str, str], url: str) -> Any:
    return await http.post("/v1/agents", headers=auth, json={"name": "a", "runtime": {"kind": "http", "url": url}})


async def _create_channel(http: Any, auth: dict[str, str], url: str) -> Any:
    return await http.post("/v1/notification-channels", headers=auth,
                           json={"name": "ops", "url": url, "events": ["run.failed"]})


@pytest.mark.parametrize("spelling", ROUTED + NORMALISED)
async def test_every_spelling_of_the_gateways_hooks_is_refused_when_saved(db_url, spelling):
    port = free_port()
    url = f"http://127.0.0.1:{port}" + spelling.format(t=TOKEN)
    async with gateway(db_url, agent_allow_cidrs=LOOPBACK, host="127.0.0.1", port=port) as (ctx, http):
        w = await factories.world(ctx)
        made = await _create_agent(http, w.auth, f"http://127.0.0.1:{port}/agent")
        assert made.status_code == 201, made.text
        answers = {
            "agent_create": await _create_agent(http, w.auth, url),
            "agent_update": await http.patch(f"/v1/agents/{made.json()['id']}", headers=w.auth, json={"url": url}),
            "channel_create": await _create_channel(http, w.auth, url),
        }
        async with ctx.pool.acquire() as conn:
            stored = await conn.fetch("SELECT endpoint_url FROM agent UNION ALL SELECT url FROM notification_channel")
    for call, answer in answers.items():
        assert answer.status_code == 422, (call, answer.text)
        code = "channel_url_forbidden" if call.startswith("channel") else "agent_url_forbidden"
        assert answer.json() == {"error": code, "message": answer.json()["message"]}, (call, answer.text)
        assert "webhook ingress" in answer.json()["message"], (call, answer.text)
    assert [r[0] for r in stored] == [f"http://127.0.0.1:{port}/agent"]


async def test_the_public_urls_hooks_are_refused_in_every_spelling_and_its_other_paths_are_not(db_url):
    async with gateway(db_url, agent_allow_cidrs=LOOPBACK, public_url="http://localhost:9090/base") as (ctx, http):
        w = await factories.world(ctx)
        for path in ("/base/hook%73/{t}", "/bas%65/hooks/{t}", "/base/%2e%2e/base/hooks%2F{t}", "/BASE/hooks/{t}",
                     "/x/%2e%2e/base/hooks/{t}"):
            answer = await _create_agent(http, w.auth, "http://127.0.0.1:9090" + path.format(t=TOKEN))
            assert answer.status_code == 422 and answer.json()["error"] == "agent_url_forbidden", (path, answer.text)
        for path in ("/base/agent", "/hook%73/{t}", "/base2/hooks/{t}"):
            answer = await _create_agent(http, w.auth, "http://127.0.0.1:9090" + path.format(t=TOKEN))
            assert answer.status_code == 201, (path, answer.text)


async def test_other_paths_on_the_gateways_own_address_stay_allowed(db_url):
    port = free_port()
    async with gateway(db_url, agent_allow_cidrs=LOOPBACK, host="127.0.0.1", port=port) as (ctx, http):
        w = await factories.world(ctx)
        for path in ELSEWHERE:
            answer = await _create_agent(http, w.auth, f"http://127.0.0.1:{port}" + path.format(t=TOKEN))
            assert answer.status_code == 201, (path, answer.text)


async def test_the_routed_spellings_do_reach_the_ingress_of_a_real_gateway(ctx):
    # What makes each of ROUTED a bypass worth refusing: aiohttp to the real app under uvicorn delivers it.
    s = await factories.small(ctx, agent_url="http://203.0.113.9/")
    async with serving(ctx) as server, aiohttp.ClientSession() as session:
        for spelling in ROUTED:
            url = f"http://127.0.0.1:{server.port}" + spelling.format(t=s.token)
            assert routed_to_ingress(url), spelling
            async with session.post(url, json={"n": 1}) as answer:
                assert answer.status == 200, (spelling, answer.status, await answer.text())
        for spelling in NORMALISED + ELSEWHERE:
            assert not routed_to_ingress(f"http://127.0.0.1:{server.port}" + spelling.format(t=s.token)), spelling


async def _deliveries(ctx: Context, trigger_id: Any) -> int:
    async with ctx.pool.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE trigger_id = $1", trigger_id))


@pytest.mark.parametrize("spelling", ROUTED)
async def test_a_stored_row_spelling_the_hooks_otherwise_is_refused_when_pushed(db_url, spelling):
    port = free_port()
    async with gateway(db_url, agent_allow_cidrs=LOOPBACK, host="127.0.0.1", port=port) as (ctx, _http):
        async with serving(ctx, port=port):
            victim = await factories.small(ctx, "victim", agent_url="http://203.0.113.9/")
            stored = f"http://127.0.0.1:{port}" + spelling.format(t=victim.token)  # saved before the guard knew
            out = await push_once(ctx, "http://203.0.113.9/agent", stored_as=stored)
            deliveries = await _deliveries(ctx, victim.trigger["id"])
    assert deliveries == 0
    task, run = out["task"], out["run"]
    assert (task["status"], task["retry_class"], task["attempt"]) == ("failed", "egress_forbidden", 1), task
    assert task["error"].startswith("egress_forbidden") and run["status"] == "failed"


@pytest.mark.parametrize("spelling", ["/hook%73/{t}", "/hooks%2F{t}", "/%2e%2e/hooks/{t}"])
async def test_a_stored_channel_spelling_the_hooks_otherwise_is_refused_when_sent(db_url, spelling):
    port = free_port()
    values = {"agent_allow_cidrs": LOOPBACK, "host": "127.0.0.1", "port": port, "worker_poll_s": 0.05}
    async with gateway(db_url, **values) as (ctx, http), serving(ctx, port=port):
        victim = await factories.small(ctx, "victim", agent_url="http://203.0.113.9/")
        w = await factories.world(ctx)
        made = await _create_channel(http, w.auth, "http://203.0.113.9/alerts")
        assert made.status_code == 201, made.text
        async with ctx.pool.acquire() as conn:  # saved before the guard knew
            await conn.execute("UPDATE notification_channel SET url = $1 WHERE id = $2::uuid",
                               f"http://127.0.0.1:{port}" + spelling.format(t=victim.token), made.json()["id"])
        ping = await http.post(f"/v1/notification-channels/{made.json()['id']}/test", headers=w.auth)
        sender = AlertSender(ctx)
        try:
            assert await sender.run_once() == 1
        finally:
            await sender.close()
        async with ctx.pool.acquire() as conn:
            row = await conn.fetchrow("SELECT * FROM notification WHERE id = $1::uuid", ping.json()["notification_id"])
        deliveries = await _deliveries(ctx, victim.trigger["id"])
    assert deliveries == 0
    assert (row["status"], row["attempt"]) == ("failed", 1) and row["last_error"].startswith("egress_forbidden")


# --- the guard against the router itself, for any path built from the pieces a bypass is made of ---

PIECES = ["/", "hooks", "hook", "%73", "%68", "ooks", "%2F", "%2f", "%2e", "%2E", ".", "..", "x", ";", "a=b",
          "%3B", "%25", "%5C", "\\", "HOOKS", "%2e%2e", "/hooks/", "%252F", "\t"]
PORT = 8181
POLICY = egress.Policy.from_settings(make_settings("postgresql://x/y", agent_allow_cidrs=LOOPBACK,
                                                   host="127.0.0.1", port=PORT))


@given(st.lists(st.sampled_from(PIECES), max_size=10))
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_whatever_the_router_hands_to_the_ingress_is_refused(pieces):
    url = f"http://127.0.0.1:{PORT}/" + "".join(pieces) + "/" + TOKEN
    if routed_to_ingress(url):
        with pytest.raises(egress.EgressRefused, match="webhook ingress"):
            POLICY.check_syntax(url)


def test_the_pieces_make_routed_paths_that_do_not_spell_hooks_plainly():
    # A property that never met a disguised routed path would prove nothing.
    def disguised(pieces: list[str]) -> bool:
        url = f"http://127.0.0.1:{PORT}/" + "".join(pieces) + "/" + TOKEN
        return routed_to_ingress(url) and "/hooks/" not in url

    found = find(st.lists(st.sampled_from(PIECES), max_size=10), disguised, settings=settings(max_examples=5000))
    assert not routed_to_ingress(f"http://127.0.0.1:{PORT}/x/hooks/{TOKEN}") and found
