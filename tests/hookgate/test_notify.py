"""The LISTEN connection comes back by itself: after its session ends, and when its server stops answering."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import asyncpg

from hookgate import notify
from hookgate.notify import NotifyListener
from tests.chaos.proxy import TcpProxy
from tests.chaos.test_proxy import proxy_target

SESSION = "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()"


async def _new_session(conn: asyncpg.Connection, listener: NotifyListener, old: int | None, within: float) -> int:
    """The pid of the listener's session once it is another than ``old``; fails after ``within`` seconds."""
    deadline = time.monotonic() + within
    while (pid := await conn.fetchval(SESSION, listener.application_name)) in (None, old) or not listener.connected:
        assert time.monotonic() < deadline, f"no new listening session within {within} s"
        await asyncio.sleep(0.02)
    return int(pid)


async def test_a_terminated_listening_session_is_reopened_at_once_without_a_caller(ctx):
    listener = NotifyListener(ctx.dsn, (notify.TRIGGERS,))
    await listener.ensure()
    try:
        async with ctx.pool.acquire() as conn:
            first = await _new_session(conn, listener, None, 1.0)
            await conn.execute("SELECT pg_terminate_backend($1)", first)
            # Nobody calls ensure() or wait(): the listener's own keeper reconnects (a failover ends sessions so).
            await _new_session(conn, listener, first, 1.0)
            await conn.execute("SELECT pg_notify($1, 'x')", notify.TRIGGERS)
        assert await listener.wait(notify.TRIGGERS, 2.0)
    finally:
        await listener.close()
    assert not listener.connected


async def test_a_listening_session_whose_server_stops_answering_is_dropped_and_reopened(ctx, server_url):
    host, port, parts = proxy_target(server_url)
    proxy = TcpProxy(host, port)
    local = proxy.start()
    url = parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{local}",
                         path=urlsplit(ctx.dsn).path).geturl()
    listener = NotifyListener(url, (notify.TRIGGERS,), ping_interval=0.2, ping_timeout=0.3)
    try:
        await listener.ensure()
        assert listener.connected
        proxy.freeze()  # nothing closes: only a ping can tell the server is gone
        deadline = time.monotonic() + 2.0
        while listener.connected:
            assert time.monotonic() < deadline, "a silent session was never dropped"
            await asyncio.sleep(0.02)
        proxy.freeze(False)
        proxy.cut()  # the reconnect attempt made while frozen hangs until its timeout: end it
        async with ctx.pool.acquire() as conn:
            await _new_session(conn, listener, None, 3.0)
            await conn.execute("SELECT pg_notify($1, 'x')", notify.TRIGGERS)
        assert await listener.wait(notify.TRIGGERS, 2.0)
    finally:
        await listener.close()
        proxy.stop()
