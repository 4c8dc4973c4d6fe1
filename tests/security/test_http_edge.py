"""The HTTP edge over real sockets: who the client is, the per-IP tables' bound, the head cap, the connection cap.

Every test talks to the app served by uvicorn on a loopback socket (a loopback peer, like a local proxy).
Unknown tokens (``/hooks/awt_x``, a malformed token) are answered 404 and charged to the client's
bad-credential debt, so with a cap of 2 the third one from the same client is 429: which requests share a
client is read off those answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.http_limits import ConnectionGate
from gateway.ingress.endpoint import ingress_state
from gateway.server import HttpServer
from hookgate import metrics
from hookgate.context import open_context
from tests import conftest
from tests.conftest import make_settings

BAD_TOKEN = "/hooks/awt_x"
LOOPBACK_TRUSTED = "127.0.0.0/8"
ENTRY_BYTES = 448  # the documented bound of one rate-table entry (docs: rate tables' memory bound)
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
PARSERS = [pytest.param(H11Protocol, id="h11"), pytest.param(HttpToolsProtocol, id="httptools")]
GET = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"


@pytest.fixture
def settings(db_url, request):
    """Settings for this test: the defaults, plus what the test passes by indirect parametrization."""
    return make_settings(db_url, **getattr(request, "param", {}))


def with_settings(**values: object) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("settings", [values], indirect=True, ids=[""])


def serving(ctx, parser: type[asyncio.Protocol] = HttpToolsProtocol,
            ) -> contextlib.AbstractAsyncContextManager[HttpServer]:
    """The app served by uvicorn with ``parser`` on a loopback socket, as the ``live_url`` fixture does."""
    return conftest.serving(ctx, parser=parser)


async def _statuses(url: str, *forwarded: str | list[str], header: str = "x-forwarded-for") -> list[int]:
    """POST a bad token once per value of the forwarded header (a list: several header lines)."""
    async with httpx.AsyncClient(base_url=url) as http:
        statuses = []
        for value in forwarded:
            lines = value if isinstance(value, list) else [value]
            answer = await http.post(BAD_TOKEN, content=b"{}", headers=[(header, line) for line in lines])
            statuses.append(answer.status_code)
        return statuses


# --- the client address -------------------------------------------------------------------------------

@with_settings(ip_bad_credential_cap=2)
async def test_forwarded_for_from_a_loopback_peer_is_ignored_without_trusted_proxies(live_url):
    assert await _statuses(live_url, "9.9.9.1", "9.9.9.2", "9.9.9.3") == [404, 404, 429]
    assert await _statuses(live_url, "9.9.9.4", header="x-real-ip") == [429]  # all are the peer


@with_settings(ip_bad_credential_cap=2, trusted_proxies=LOOPBACK_TRUSTED)
async def test_forwarded_for_from_a_trusted_proxy_is_believed_by_its_parsed_address(live_url):
    # The same client in three spellings, the last as two header lines with a spoofed hop on the left.
    assert await _statuses(live_url, "9.9.9.1", "::ffff:9.9.9.1", ["6.6.6.6", "9.9.9.1"]) == [404, 404, 429]
    assert await _statuses(live_url, "9.9.9.2", "6.6.6.6, 9.9.9.2, 127.0.0.9") == [404, 404]  # another client
    assert await _statuses(live_url, "9.9.9.3", header="x-real-ip") == [404]


@with_settings(ip_bad_credential_cap=2, trusted_proxies=LOOPBACK_TRUSTED)
async def test_a_garbage_forwarded_for_falls_back_to_the_peer(live_url):
    garbage = ["not-an-ip", "", "9.9.9.300", "9.9.9.1, nonsense", "1.2.3.4:80", "[2001:db8::1]"]
    assert await _statuses(live_url, *garbage) == [404, 404, 429, 429, 429, 429]  # all charged to 127.0.0.1
    assert await _statuses(live_url, "9.9.9.1") == [404]  # a real forwarded client is not the peer


@with_settings(ip_bad_credential_cap=2, trusted_proxies=LOOPBACK_TRUSTED)
@pytest.mark.parametrize(("first", "second"), [
    ("1.2.3.4", "::ffff:1.2.3.4"),
    ("2001:db8::1", "2001:DB8:0::1"),
    ("2001:db8::1", "2001:db8:0:0:0:0:0:1%eth0"),
    ("2001:db8:1:2::1", "2001:db8:1:2:ffff::9"),  # one /64
], ids=["ipv4-mapped", "ipv6-spelling", "ipv6-zone", "ipv6-same-64"])
async def test_rate_windows_are_keyed_by_the_parsed_address(live_url, first, second):
    assert await _statuses(live_url, first, second, first) == [404, 404, 429]


def _table_bytes(window) -> int:
    """Bytes held by a rate table: the ordered dict with its nodes, each key, each value and its numbers."""
    table = window._slots
    return sys.getsizeof(table) + sum(sys.getsizeof(key) + sys.getsizeof(value) + sum(map(sys.getsizeof, value))
                                      for key, value in table.items())


@with_settings(ip_bad_credential_cap=1, rate_table_size=100, trusted_proxies=LOOPBACK_TRUSTED)
async def test_rate_tables_stay_bounded_in_bytes_under_a_flood_and_keep_gating(ctx):
    zone = "z" * 2000  # a zone id is no part of the key: it must not make an entry larger
    flood = [f"10.0.{n >> 8}.{n & 255}" if n % 2 else f"2001:db8:{n:x}::1%{zone}" for n in range(400)]
    async with serving(ctx) as server:
        url = f"http://127.0.0.1:{server.port}"
        assert set(await _statuses(url, *flood)) == {404}
        gates = ingress_state(server.app).gates  # type: ignore[arg-type]
        for table in (gates.requests, gates.debt):
            assert len(table) == 100
            assert _table_bytes(table) <= 100 * ENTRY_BYTES
        # The most recent offender is still held; the oldest was evicted and starts afresh; the gate still counts.
        assert await _statuses(url, flood[-1], flood[0], flood[0], "9.9.9.9", "9.9.9.9") == [429, 404, 429, 404, 429]


# --- the request head cap -------------------------------------------------------------------------------

BIG_HEADER = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 100 * 1024 + b"\r\n\r\n"
BIG_LINE = b"GET /healthz?" + b"q" * 100 * 1024 + b" HTTP/1.1\r\nhost: x\r\n\r\n"
MANY_HEADERS = b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"".join(b"x-h%d: %s\r\n" % (n, b"v" * 40)
                                                                   for n in range(2000)) + b"\r\n"


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response: its status and body (up to its content-length, else to the close)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    lengths = [int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")]
    body = reader.readexactly(lengths[0]) if lengths else reader.read()
    return int(lines[0].split(" ")[1]), await asyncio.wait_for(body, 5)


async def _refused_431(reader: asyncio.StreamReader) -> None:
    status, body = await _read_answer(reader)
    assert status == 431 and body.startswith(b'{"error":"headers_too_large","message":')
    assert await asyncio.wait_for(reader.read(), 5) == b""  # and the connection is closed


async def _writes(writer: asyncio.StreamWriter, *parts: bytes, pause: float = 0.05) -> None:
    for part in parts:
        writer.write(part)
        await writer.drain()
        await asyncio.sleep(pause)


UNDER_THE_CAP = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 63 * 1024 + b"\r\n\r\n"


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("head", [
    pytest.param(BIG_HEADER, id="one-100KiB-header"),
    pytest.param(BIG_LINE, id="huge-request-line"),
    pytest.param(MANY_HEADERS, id="many-small-headers"),
])
@pytest.mark.parametrize("how", ["one-write", "last-read-crosses-the-cap", "keep-alive-second", "pipelined"])
async def test_an_oversized_head_gets_431_json_and_a_close(ctx, parser, head, how):
    async with serving(ctx, parser) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        if how == "one-write":
            await _writes(writer, head)
        elif how == "last-read-crosses-the-cap":  # 60 KiB, then the rest with the end of the head
            await _writes(writer, head[:60 * 1024], head[60 * 1024:], pause=0.2)
        elif how == "keep-alive-second":  # after a head just under the cap, which is served
            await _writes(writer, UNDER_THE_CAP)
            assert (await _read_answer(reader))[0] == 200
            await _writes(writer, head)
        else:
            await _writes(writer, GET + head)
            assert (await _read_answer(reader))[0] == 200
        await _refused_431(reader)
        writer.close()


async def test_a_head_that_never_ends_gets_431_json_once_past_the_cap_on_either_parser(ctx):
    start = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-endless: "
    for parser in (H11Protocol, HttpToolsProtocol):
        async with serving(ctx, parser) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await _writes(writer, start, *[b"e" * 1024] * 64, pause=0.002)  # just past 64 KiB, in small reads
            await _refused_431(reader)
            writer.close()


# --- the connection cap ---------------------------------------------------------------------------------

@contextlib.asynccontextmanager
async def _connections(url: str) -> AsyncIterator[Callable[..., Awaitable[Stream]]]:
    """A function opening a raw connection to ``url``, from loopback address ``source`` if given; all closed on exit."""
    host, port = url.removeprefix("http://").split(":")
    opened: list[Stream] = []

    async def connect(source: str | None = None) -> Stream:
        local = (source, 0) if source else None
        opened.append(await asyncio.open_connection(host, int(port), local_addr=local))
        return opened[-1]

    try:
        yield connect
    finally:
        for _, writer in opened:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def _serves(stream: Stream) -> bool:
    """True if the connection answers a request; False if the server closed it."""
    reader, writer = stream
    try:
        writer.write(GET)
        await writer.drain()
        return (await _read_answer(reader))[0] == 200
    except (asyncio.IncompleteReadError, ConnectionError):
        return False


# --- one client's share of the connections ---------------------------------------------------------------
# A loopback peer is any 127.x.y.z: each test's clients bind a source address of their own, so they are
# different IPs to the server.

PARTIAL = b"GET /healthz HTTP/1.1\r\nhost: x\r\n"  # a request head still arriving: the connection is busy


async def _busy(stream: Stream) -> Stream:
    """``stream`` with the start of a request sent (so not idle); finish it with :func:`_finishes`."""
    stream[1].write(PARTIAL)
    await stream[1].drain()
    return stream


async def _settled(gate: ConnectionGate, idle: int) -> None:
    """Wait (up to 5 s) until the server has read what its clients sent: ``idle`` of its connections are idle."""
    for _ in range(500):
        if gate.idle == idle:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{gate.idle} connections are idle, not {idle}")


def _closed(reason: str) -> float:
    """Connections this process closed to hold the limits, for ``reason`` (its /metrics counter)."""
    return metrics.REGISTRY.get_sample_value("hookgate_http_connections_closed_total", {"reason": reason}) or 0.0


async def _finishes(stream: Stream) -> bool:
    """True if a connection left mid-head by :func:`_busy` is still open and answers once the head ends."""
    reader, writer = stream
    try:
        writer.write(b"\r\n")
        await writer.drain()
        return (await _read_answer(reader))[0] == 200
    except (asyncio.IncompleteReadError, ConnectionError):
        return False


@with_settings(max_connections=8, max_connections_per_ip=8)
async def test_past_the_connection_cap_with_none_idle_new_connections_are_closed_and_open_ones_kept(ctx):
    async with serving(ctx) as server, _connections(f"http://127.0.0.1:{server.port}") as connect:
        gate = server.connections
        held = [await _busy(await connect()) for _ in range(8)]
        await _settled(gate, idle=0)
        assert not await _serves(await connect())  # the ninth
        for _, writer in held[:2]:
            writer.close()
        fresh = []
        for _ in range(50):  # until the server has seen the two closes
            stream = await connect()
            if await _serves(stream):
                fresh.append(await _busy(stream))
                if len(fresh) == 2:
                    break
            else:
                await asyncio.sleep(0.02)
        assert len(fresh) == 2
        await _settled(gate, idle=0)
        assert not await _serves(await connect())  # full again
        assert [await _finishes(s) for s in held[2:] + fresh] == [True] * 8  # the open ones were untouched


async def test_the_connection_caps_default_to_1024_per_server_and_an_eighth_of_it_per_ip(db_url, monkeypatch):
    async with open_context(make_settings(db_url), migrate=False) as ctx:
        gate = HttpServer(ctx).connections
        assert (gate.limit, gate.per_ip) == (1024, 128)
    monkeypatch.setenv("HOOKGATE_MAX_CONNECTIONS", "80")
    settings = make_settings(db_url)
    assert (settings.max_connections, settings.max_connections_per_ip) == (80, 10)
    assert make_settings(db_url, max_connections=7).max_connections_per_ip == 1
    monkeypatch.setenv("HOOKGATE_MAX_CONNECTIONS_PER_IP", "3")
    assert make_settings(db_url).max_connections_per_ip == 3


@with_settings(max_connections=40, max_connections_per_ip=10)
async def test_one_ip_flooding_idle_connections_keeps_only_its_limit_and_healthz_answers_others(live_url):
    closed = _closed("idle")
    async with _connections(live_url) as connect:
        flood = [await connect("127.0.0.1") for _ in range(60)]  # never a byte sent: idle
        assert await _serves(await connect("127.0.0.2"))
        # Each connection past its limit took the place of its own longest idle one: the newest ten remain.
        assert [await _serves(s) for s in flood] == [False] * 50 + [True] * 10
    assert _closed("idle") == closed + 50


@with_settings(max_connections=40, max_connections_per_ip=10)
async def test_one_ip_holding_its_limit_of_busy_connections_is_refused_more_and_healthz_answers_others(ctx):
    async with serving(ctx) as server, _connections(f"http://127.0.0.1:{server.port}") as connect:
        held = [await _busy(await connect("127.0.0.1")) for _ in range(10)]  # slow requests: nothing to close
        await _settled(server.connections, idle=0)
        refused = _closed("refused_ip")
        extra = [await connect("127.0.0.1") for _ in range(30)]
        assert await _serves(await connect("127.0.0.2"))
        assert [await _serves(s) for s in extra] == [False] * 30  # the flooding IP's excess is closed
        assert _closed("refused_ip") == refused + 30
        assert [await _finishes(s) for s in held] == [True] * 10  # its requests in progress are untouched


@with_settings(max_connections=40, max_connections_per_ip=10)
@pytest.mark.parametrize("parser", PARSERS)
async def test_at_the_cap_the_longest_idle_keep_alive_connection_is_closed_before_a_new_one_is_refused(ctx, parser):
    async with serving(ctx, parser) as server, _connections(f"http://127.0.0.1:{server.port}") as connect:
        sources = [f"127.0.0.{n}" for n in (1, 2, 3, 4)]
        busy = [await _busy(await connect(source)) for source in sources for _ in range(5)]
        idle = [await connect(source) for source in sources for _ in range(5)]
        assert [await _serves(s) for s in idle] == [True] * 20  # served once each, now idle keep-alive
        newcomer = await connect("127.0.0.5")
        assert await _serves(newcomer)  # the 41st connection
        assert [await _serves(s) for s in idle] == [False] + [True] * 19  # only the one idle the longest closed
        # With nothing idle left, a new connection is refused and the busy ones are untouched.
        kept = [*busy, *[await _busy(s) for s in [*idle[1:], newcomer]]]
        await _settled(server.connections, idle=0)
        refused = _closed("refused_cap")
        assert not await _serves(await connect("127.0.0.6"))
        assert _closed("refused_cap") == refused + 1
        assert [await _finishes(s) for s in kept] == [True] * 40


@with_settings(max_connections=40, max_connections_per_ip=10, trusted_proxies="127.0.0.1/32")
async def test_a_trusted_proxy_s_connections_count_only_against_the_cap(live_url):
    async with _connections(live_url) as connect:
        proxied = [await connect("127.0.0.1") for _ in range(30)]  # a balancer: its clients' connections
        others = [await connect("127.0.0.2") for _ in range(12)]
        assert [await _serves(s) for s in proxied] == [True] * 30
        assert [await _serves(s) for s in others] == [False] * 2 + [True] * 10  # the limit applies to 127.0.0.2
