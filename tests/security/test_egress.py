"""Egress policy: agent URLs are checked when an agent is created and again at connect time.

Tests here run with the default (empty) ``HOOKGATE_AGENT_ALLOW_CIDRS`` unless they say otherwise; the
agents they push to are real local servers speaking raw HTTP over asyncio streams, so the bytes on the wire
(chunking, garbage, an abrupt close) are exactly what each test needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import re
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import hypothesis
import pytest
from hypothesis import strategies as st

from hookgate import cli, egress, logs
from hookgate.context import Context, open_context
from hookgate.settings import Settings
from tests import factories
from tests.conftest import TEST_SECRET_KEY, asgi_client, make_settings, serving
from tests.processes import free_port
from tests.worker.conftest import FAST, add_delivery
from worker.deliveries import DeliveryWorker
from worker.push import MAX_RESULT_BYTES, Pusher

PUBLIC = "https://hooks.example.com"
LOOPBACK = "127.0.0.0/8,::1/128"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def settings(db_url: str) -> Settings:
    """Nothing exempt from the egress policy: the default."""
    return make_settings(db_url, agent_allow_cidrs="", public_url=PUBLIC, **FAST)


@contextlib.asynccontextmanager
async def gateway(db_url: str, **overrides: Any) -> AsyncIterator[tuple[Context, httpx.AsyncClient]]:
    """A context and an in-process admin client with settings of the test's choosing."""
    values = {"agent_allow_cidrs": "", "public_url": PUBLIC} | FAST | overrides
    async with open_context(make_settings(db_url, **values), migrate=False) as ctx, asgi_client(ctx) as http:
        yield ctx, http


async def _create(http: httpx.AsyncClient, auth: dict[str, str], url: str) -> httpx.Response:
    return await http.post("/v1/agents", headers=auth, json={"name": "a", "runtime": {"kind": "http", "url": url}})


async def _agent_count(ctx: Context) -> int:
    async with ctx.pool.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM agent"))


FORBIDDEN = [
    "http://127.0.0.1:9/agent", "http://127.9.9.9/agent", "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/agent", "http://172.16.0.1/agent", "http://172.31.255.255/agent", "http://192.168.1.1/agent",
    "http://100.64.0.1/agent", "http://0.0.0.0:9/agent", "http://224.0.0.1/agent",
    "http://[::1]:9/agent", "http://[fe80::1]/agent", "http://[fc00::1]/agent", "http://[fd12:3456::1]/agent",
    "http://[::]/agent", "http://[ff02::1]/agent",
    "http://[::ffff:127.0.0.1]:9/agent", "http://[::ffff:169.254.169.254]/agent", "http://[::ffff:10.0.0.1]/agent",
    "http://[64:ff9b::7f00:1]/agent", "http://[2002:a9fe:a9fe::1]/agent",  # NAT64 127.0.0.1, 6to4 169.254.169.254
    "http://[::127.0.0.1]:9/agent", "http://[::10.0.0.1]/agent", "http://[::a9fe:a9fe]/agent",  # IPv4-compatible
    "http://[64:ff9b:1::7f00:1]/agent", "http://[64:ff9b:1:abcd::a00:1]/agent",  # local-use NAT64
    "http://[2001:0:cb00:7109:0:0:80ff:fffe]/agent",  # Teredo, client 127.0.0.1 (XOR-ed) via a public server
    "http://[::ffff:0:7f00:1]/agent",  # IPv4-translated 127.0.0.1
    "http://2130706433/agent", "http://0x7f.1/agent",  # legacy spellings of 127.0.0.1
    "http://localhost:9/agent", "https://LOCALHOST./agent",
    f"{PUBLIC}/agent", "http://hooks.example.com:8443/elsewhere",
]


@pytest.mark.parametrize("url", FORBIDDEN)
async def test_agent_create_is_refused_for_a_forbidden_address(ctx, client, url, world):
    answer = await _create(client, world.auth, url)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "agent_url_forbidden" and answer.json()["message"]
    assert await _agent_count(ctx) == 0


async def test_a_name_that_does_not_resolve_is_refused_with_its_own_code(ctx, client, world):
    answer = await _create(client, world.auth, "http://no-such-agent.invalid/agent")
    assert answer.status_code == 422 and answer.json()["error"] == "agent_url_unresolvable", answer.text
    assert await _agent_count(ctx) == 0


async def test_a_name_resolving_to_loopback_gets_the_same_answer_as_the_address(world, client):
    by_name = await _create(client, world.auth, "http://localhost:9/agent")
    by_address = await _create(client, world.auth, "http://127.0.0.1:9/agent")
    assert by_name.status_code == by_address.status_code == 422
    assert by_name.json() == by_address.json()  # nothing tells what the name resolved to


async def test_a_public_address_is_allowed_by_default(world, client):
    answer = await _create(client, world.auth, "http://203.0.113.9/agent")
    assert answer.status_code == 201, answer.text


async def test_ranges_in_the_allow_list_are_exempt_and_others_stay_refused(db_url):
    async with gateway(db_url, agent_allow_cidrs=f"10.0.0.0/8,{LOOPBACK}") as (ctx, http):
        w = await factories.world(ctx)
        for url in ("http://10.0.0.1/agent", "http://127.0.0.1:9/agent", "http://[::1]:9/agent",
                    "http://localhost:9/agent", "http://[::ffff:127.0.0.1]:9/agent"):
            answer = await _create(http, w.auth, url)
            assert answer.status_code == 201, (url, answer.text)
        for url in ("http://192.168.1.1/agent", "http://169.254.169.254/", "http://[fc00::1]/", f"{PUBLIC}/a"):
            answer = await _create(http, w.auth, url)
            assert answer.status_code == 422 and answer.json()["error"] == "agent_url_forbidden", (url, answer.text)


async def test_the_gateways_own_hooks_are_refused_even_with_loopback_allowed(db_url):
    async with gateway(db_url, agent_allow_cidrs=LOOPBACK, host="0.0.0.0", port=8181,
                       public_url="http://localhost:9090/base") as (ctx, http):
        w = await factories.world(ctx)
        for url in ("http://127.0.0.1:8181/hooks/awt_x", "http://localhost:8181/hooks/awt_x",
                    "http://[::1]:8181/hooks/awt_x", "http://127.0.0.1:8181/agent/../hooks/awt_x",
                    "http://127.0.0.1:8181//hooks/awt_x", "http://127.0.0.1:9090/base/hooks/awt_x",
                    "http://localhost:9090/base/hooks/awt_x"):
            answer = await _create(http, w.auth, url)
            assert answer.status_code == 422 and answer.json()["error"] == "agent_url_forbidden", (url, answer.text)
        for url in ("http://127.0.0.1:8181/agent", "http://127.0.0.1:9/hooks/awt_x", "http://127.0.0.1:9090/agent"):
            answer = await _create(http, w.auth, url)
            assert answer.status_code == 201, (url, answer.text)


@pytest.mark.parametrize("url", ["http://bob:hunter2@10.0.0.1/agent", "http://bob@10.0.0.1/agent",
                                 "http://:hunter2@10.0.0.1/agent"])
async def test_credentials_in_the_agent_url_are_refused_and_not_echoed(db_url, url):
    async with gateway(db_url, agent_allow_cidrs="10.0.0.0/8") as (ctx, http):
        w = await factories.world(ctx)
        answer = await _create(http, w.auth, url)
        assert answer.status_code == 422 and answer.json()["error"] == "agent_url_forbidden", answer.text
        assert "hunter2" not in answer.text and "bob" not in answer.text
        assert await _agent_count(ctx) == 0


async def test_stored_credentials_in_an_agent_url_are_redacted_in_every_answer(world, client):
    agent = await factories.http_agent(world, url="http://bob:hunter2@203.0.113.9/agent")  # an older row
    one = await client.get(f"/v1/agents/{agent.row['id']}", headers=world.auth)
    many = await client.get("/v1/agents", headers=world.auth)
    for answer in (one, many):
        assert answer.status_code == 200
        assert "hunter2" not in answer.text and "bob" not in answer.text, answer.text
    assert one.json()["runtime"]["url"].endswith("@203.0.113.9/agent")


# --- who may ask: the permission model is unchanged and the new checks answer nobody new ---


async def test_anonymous_callers_get_401_whatever_the_url(ctx, client):
    for url in ("http://127.0.0.1:9/agent", "http://no-such-agent.invalid/", "http://203.0.113.9/agent"):
        answer = await _create(client, {}, url)
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized", answer.text
    assert await _agent_count(ctx) == 0


async def test_a_plain_member_and_another_workspace_get_the_owners_answer(ctx, client):
    w = await factories.world(ctx)
    other = await factories.world(ctx, "other")
    made = await client.post("/v1/members", headers=w.auth, json={"name": "m", "role": "member"})
    member = {"authorization": f"Bearer {made.json()['api_key']}"}
    answers = [await _create(client, auth, "http://169.254.169.254/") for auth in (w.auth, member, other.auth)]
    assert {a.status_code for a in answers} == {422}
    assert answers[0].json() == answers[1].json() == answers[2].json()
    assert (await _create(client, member, "http://203.0.113.9/agent")).status_code == 201  # members may create
    assert await _agent_count(ctx) == 1
    listed = await client.get("/v1/agents", headers=other.auth)
    assert listed.json()["items"] == []


# --- at connect time ---


@contextlib.asynccontextmanager
async def listener(handle: Handler) -> AsyncIterator[int]:
    """A real local TCP server on 127.0.0.1 running ``handle`` per connection; yields its port."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP request, head and body (by Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length:\s*(\d+)", head)
    return head + await reader.readexactly(int(length.group(1)) if length else 0)


class Agent:
    """An HTTP agent answering every push with 200 ``{"ok": true}``; counts what reaches it."""

    def __init__(self) -> None:
        self.hits: list[bytes] = []

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            self.hits.append(await read_request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n"
                         b"connection: close\r\n\r\n{\"ok\":true}")
            await writer.drain()
        writer.close()


async def push_once(ctx: Context, url: str, *, stored_as: str | None = None) -> dict[str, Any]:
    """Make an agent with ``url`` (then, if given, rewrite it in the database to ``stored_as``), run one push."""
    w = await factories.world(ctx)
    agent = await factories.http_agent(w, url=url, timeout_s=5)
    ap = await factories.autopilot(w, agent.row["id"])
    trigger, _ = await factories.webhook_trigger(w, ap, rate_limit_per_minute=100000)
    async with ctx.pool.acquire() as conn:
        if stored_as is not None:  # what a DNS answer changed after creation amounts to
            await conn.execute("UPDATE agent SET endpoint_url = $1 WHERE id = $2", stored_as, agent.row["id"])
        _, run_id = await add_delivery(conn, ap, trigger)
    pusher = Pusher(ctx, holder="t1")
    await DeliveryWorker(ctx, holder="t1", pusher=pusher).run_once()
    await pusher.stop(deadline=15)
    async with ctx.pool.acquire() as conn:
        task = await conn.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", run_id)
        run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
    return {"task": dict(task), "run": dict(run)}


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_stored_url_that_became_forbidden_fails_at_connect_time_and_nothing_is_sent(ctx, host):
    agent = Agent()
    async with listener(agent) as port:
        out = await push_once(ctx, "http://203.0.113.9/agent", stored_as=f"http://{host}:{port}/agent")
    task, run = out["task"], out["run"]
    assert agent.hits == []
    assert task["status"] == "failed" and task["retry_class"] == "egress_forbidden" and task["attempt"] == 1
    assert task["error"].startswith("egress_forbidden")
    assert str(port) not in task["error"] and host not in task["error"]
    assert run["status"] == "failed" and run["reason"].startswith("egress_forbidden")


async def test_the_same_agent_is_reached_once_its_range_is_allowed(db_url):
    agent = Agent()
    async with listener(agent) as port, gateway(db_url, agent_allow_cidrs=LOOPBACK) as (ctx, _http):
        out = await push_once(ctx, f"http://127.0.0.1:{port}/agent")
    assert len(agent.hits) == 1 and out["task"]["status"] == "succeeded"


async def test_an_older_agent_with_credentials_in_its_url_is_still_pushed_to(db_url):
    agent = Agent()
    async with listener(agent) as port, gateway(db_url, agent_allow_cidrs=LOOPBACK) as (ctx, _http):
        out = await push_once(ctx, f"http://bob:hunter2@127.0.0.1:{port}/agent")
    assert len(agent.hits) == 1 and out["task"]["status"] == "succeeded"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.2"])
async def test_a_push_to_the_gateways_own_hooks_is_refused_at_connect_time(db_url, host):
    port = free_port()
    async with gateway(db_url, agent_allow_cidrs=LOOPBACK, host="127.0.0.1", port=port) as (ctx, _http):
        async with serving(ctx, port=port):
            w = await factories.world(ctx, "victim")
            ap = await factories.autopilot(w, (await factories.http_agent(w, url="http://203.0.113.9/")).row["id"])
            _, token = await factories.webhook_trigger(w, ap)
            out = await push_once(ctx, "http://203.0.113.9/agent", stored_as=f"http://{host}:{port}/hooks/{token}")
            async with ctx.pool.acquire() as conn:
                deliveries = await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE trigger_id IN "
                                                 "(SELECT id FROM autopilot_trigger WHERE autopilot_id = $1)", ap["id"])
    assert deliveries == 0
    assert out["task"]["status"] == "failed" and out["task"]["retry_class"] == "egress_forbidden"


async def test_a_pooled_connection_to_the_gateway_is_not_reused_for_its_hooks(db_url):
    port = free_port()
    base = f"http://[::ffff:127.0.0.1]:{port}"  # the gateway, by a spelling its name check does not know
    async with gateway(db_url, agent_allow_cidrs=LOOPBACK, host="127.0.0.1", port=port) as (ctx, _http):
        async with serving(ctx, port=port):
            s = await factories.small(ctx, agent_url="http://203.0.113.9/")
            runs = {}
            for name, url in (("other_path", f"{base}/agent"), ("hooks", f"{base}/hooks/{s.token}")):
                agent = await factories.http_agent(s.world, url=url, name=name)
                mine = await factories.autopilot(s.world, agent.row["id"], title=name)
                mine_trigger, _ = await factories.webhook_trigger(s.world, mine)
                async with ctx.pool.acquire() as conn:
                    runs[name] = (await add_delivery(conn, mine, mine_trigger))[1]
            pusher = Pusher(ctx, holder="t1")  # one pusher, one connection pool, for both pushes in turn
            for _ in runs:
                await DeliveryWorker(ctx, holder="t1", pusher=pusher).run_once()
                await asyncio.sleep(0.2)
            await pusher.stop(deadline=15)
            async with ctx.pool.acquire() as conn:
                first = await conn.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", runs["other_path"])
                hooks = await conn.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", runs["hooks"])
                deliveries = await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE trigger_id = $1",
                                                 s.trigger["id"])
    assert "404" in first["error"]  # the gateway answered the first push: its connection was pooled
    assert hooks["retry_class"] == "egress_forbidden" and deliveries == 0


async def _close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


async def _banner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
    with contextlib.suppress(ConnectionError):
        await writer.drain()
        await asyncio.sleep(0.2)
    writer.close()


async def _reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        await read_request(reader)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
    writer.close()


async def test_closed_and_open_non_http_ports_read_the_same(db_url):
    async with (listener(_close_at_once) as closing, listener(_banner) as banner, listener(_reset) as reset,
                gateway(db_url, agent_allow_cidrs=LOOPBACK) as (ctx, _http)):
        urls = {"closed": f"http://127.0.0.1:{free_port()}/agent", "closes": f"http://127.0.0.1:{closing}/agent",
                "banner": f"http://127.0.0.1:{banner}/agent", "reset": f"http://127.0.0.1:{reset}/agent",
                "tls_to_non_tls": f"https://127.0.0.1:{banner}/agent"}
        outs = {name: await push_once(ctx, url) for name, url in urls.items()}
    errors = {name: out["task"]["error"] for name, out in outs.items()}
    assert len(set(errors.values())) == 1, errors
    assert {out["task"]["status"] for out in outs.values()} == {"queued"}  # retried, like any transport fault
    assert {out["task"]["retry_class"] for out in outs.values()} == {"transient"}
    [text] = set(errors.values())
    assert text.startswith("unreachable") and "Error" not in text


def _chunked(parts: list[bytes]) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
            for part in parts:
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
                await asyncio.sleep(0.05)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()
    return handle


async def test_a_reply_sent_in_several_chunks_is_read_whole_up_to_the_cap(db_url):
    reply = {"items": ["x" * 1000 for _ in range(40)]}
    raw = json.dumps(reply).encode()
    assert 32 * 1024 < len(raw) <= MAX_RESULT_BYTES
    parts = [raw[i:i + 8192] for i in range(0, len(raw), 8192)]
    async with listener(_chunked(parts)) as port, gateway(db_url, agent_allow_cidrs=LOOPBACK) as (ctx, _http):
        out = await push_once(ctx, f"http://127.0.0.1:{port}/agent")
    assert out["task"]["status"] == "succeeded"
    assert out["task"]["result"] == {"http_status": 200, "body": reply}


async def test_a_reply_longer_than_the_cap_is_not_read_to_its_end(db_url):
    sent = []

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
            part = b"[" + b"1," * 8000
            for _ in range(10_000):  # far beyond the cap: ~160 MB if anyone read it all
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
                sent.append(len(part))
                await asyncio.sleep(0.001)
        writer.close()

    async with listener(endless) as port, gateway(db_url, agent_allow_cidrs=LOOPBACK) as (ctx, _http):
        out = await asyncio.wait_for(push_once(ctx, f"http://127.0.0.1:{port}/agent"), 30)
    assert out["task"]["status"] == "succeeded" and out["task"]["result"] == {"http_status": 200}
    assert sum(sent) < 100 * MAX_RESULT_BYTES


def test_logs_never_carry_the_credentials_of_a_url():
    line = logs.redact('{"msg": "push to http://bob:hunter2@203.0.113.9/agent failed"}')
    assert "hunter2" not in line and "bob" not in line and "203.0.113.9/agent" in line


# --- the setting ---


def test_serve_on_the_embedded_database_allows_loopback_agents_and_says_so(caplog, tmp_path):
    embedded = Settings(data_dir=tmp_path, database_url=None, agent_allow_cidrs=None)
    with caplog.at_level(logging.INFO):
        served = cli.serve_defaults(embedded)
    assert served.agent_allow_cidrs == ["127.0.0.0/8", "::1/128"]
    assert "HOOKGATE_AGENT_ALLOW_CIDRS" in caplog.text
    assert cli.serve_defaults(Settings(data_dir=tmp_path, database_url=None, agent_allow_cidrs="")) \
        .agent_allow_cidrs == []  # an operator's explicit empty list stands
    external = Settings(database_url="postgresql://x/y", secret_key=TEST_SECRET_KEY, agent_allow_cidrs=None)
    assert not cli.serve_defaults(external).agent_allow_cidrs


def test_the_setting_is_validated_and_listed_in_help():
    with pytest.raises(ValueError, match="not a CIDR"):
        Settings(database_url="postgresql://x/y", agent_allow_cidrs="10.0.0.0/8,nonsense")
    assert "HOOKGATE_AGENT_ALLOW_CIDRS" in cli.build_parser().format_help()


@pytest.mark.parametrize("reply", [
    b"[" * 5000 + b"]" * 5000,  # past the parser's recursion limit
    b'{"a":' + b"[" * 64 + b"]" * 64 + b"}",  # past the nesting limit every request body has (65 levels)
    b'{"text":"a\\u0000b"}', b'{"text":"\\udcff"}', b'{"n":1e999}',  # jsonb holds no NUL, lone surrogate, inf
], ids=["recursion", "too_deep", "nul", "surrogate", "infinite"])
async def test_a_json_reply_too_deep_or_unstorable_still_succeeds_without_its_body(db_url, reply, caplog):
    async with listener(_chunked([reply])) as port, gateway(db_url, agent_allow_cidrs=LOOPBACK) as (ctx, _http):
        with caplog.at_level(logging.ERROR):
            out = await asyncio.wait_for(push_once(ctx, f"http://127.0.0.1:{port}/agent"), 30)
    assert "push failed unexpectedly" not in caplog.text
    assert out["task"]["status"] == "succeeded" and out["task"]["result"] == {"http_status": 200}, out["task"]


async def test_a_public_url_given_as_an_address_is_refused_in_every_spelling(db_url):
    async with gateway(db_url, public_url="https://203.0.113.50:8443") as (ctx, http):
        w = await factories.world(ctx)
        for url in ("https://203.0.113.50:8443/agent", "http://203.0.113.50/agent", "http://[::ffff:203.0.113.50]/a",
                    "http://[::ffff:cb00:7132]:8443/a", "http://3405803826/agent", "http://0xcb.0.0x71.0x32/agent"):
            answer = await _create(http, w.auth, url)
            assert answer.status_code == 422 and answer.json()["error"] == "agent_url_forbidden", (url, answer.text)
        assert (await _create(http, w.auth, "http://203.0.113.51/agent")).status_code == 201


def test_the_connect_time_check_refuses_the_public_address_in_every_spelling():
    # No test can listen on a public address, so the connector's check is called with what it gets from
    # the resolver: a sockaddr per address tried.
    policy = egress.Policy.from_settings(make_settings("postgresql://x/y", public_url="https://203.0.113.50"))
    for family, sockaddr in ((socket.AF_INET, ("203.0.113.50", 443)),
                             (socket.AF_INET6, ("::ffff:203.0.113.50", 443, 0, 0)),
                             (socket.AF_INET6, ("::ffff:cb00:7132", 80, 0, 0))):
        with pytest.raises(egress.ConnectRefused):
            policy._socket((family, socket.SOCK_STREAM, 0, "", sockaddr))
    policy._socket((socket.AF_INET, socket.SOCK_STREAM, 0, "", ("203.0.113.51", 443))).close()


# --- every IPv6 spelling of an IPv4 address is decided by that address ---

def _spellings(v4: ipaddress.IPv4Address, server: ipaddress.IPv4Address) -> dict[str, ipaddress.IPv6Address]:
    """``v4`` in each IPv6 form that carries it (Teredo with ``server`` as its server, the client XOR-ed)."""
    n = int(v4)
    return {
        "mapped": ipaddress.IPv6Address(0xFFFF << 32 | n),
        "translated": ipaddress.IPv6Address(0xFFFF << 48 | n),
        "compatible": ipaddress.IPv6Address(n),
        "nat64": ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | n),
        "nat64_local": ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b:1:abcd::")) | n),
        "6to4": ipaddress.IPv6Address(0x2002 << 112 | n << 80 | 1),
        "teredo": ipaddress.IPv6Address(0x20010000 << 96 | int(server) << 64 | 0x8000FFFF << 32 | n ^ 0xFFFFFFFF),
    }


STRICT = egress.Policy.from_settings(make_settings("postgresql://x/y", agent_allow_cidrs="",
                                                   public_url="https://203.0.113.50"))
ALLOWING = egress.Policy.from_settings(make_settings("postgresql://x/y", agent_allow_cidrs="10.0.0.0/8,127.0.0.0/8"))


@hypothesis.given(st.ip_addresses(v=4), st.ip_addresses(v=4))
@hypothesis.settings(max_examples=500, deadline=None)
def test_each_ipv6_spelling_of_an_ipv4_address_is_allowed_exactly_when_the_address_is(v4, server):
    for policy in (STRICT, ALLOWING):
        for name, spelt in _spellings(v4, server).items():
            assert egress.embedded_ipv4(spelt) == v4, name
            assert policy.address_allowed(spelt) == policy.address_allowed(v4), (name, spelt)
            assert policy.is_public_ip(spelt) == (v4 == ipaddress.IPv4Address("203.0.113.50")), (name, spelt)


@pytest.mark.parametrize("spelt", ["::127.0.0.1", "::10.0.0.1", "::169.254.169.254", "64:ff9b:1::7f00:1",
                                   "64:ff9b:1:ffff::a9fe:a9fe", "2001:0:cb00:7109::80ff:fffe",
                                   "2001:0:7f00:1::f5ff:fffe", "::ffff:0:a00:1"])
def test_the_connect_time_check_refuses_the_new_spellings_of_internal_addresses(spelt):
    with pytest.raises(egress.ConnectRefused):
        STRICT._socket((socket.AF_INET6, socket.SOCK_STREAM, 0, "", (spelt, 80, 0, 0)))


@pytest.mark.parametrize("spelt", ["::203.0.113.9", "64:ff9b:1::cb00:7109", "2001:0:7f00:1::34ff:8ef6"])
def test_the_same_spellings_of_a_public_address_stay_allowed(spelt):
    STRICT._socket((socket.AF_INET6, socket.SOCK_STREAM, 0, "", (spelt, 80, 0, 0))).close()
