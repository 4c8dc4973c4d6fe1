"""The chaos TCP proxy really forwards, cuts and blocks PostgreSQL connections."""

from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest

from tests.chaos.proxy import TcpProxy


def proxy_target(server_url):
    """(host or socket dir, port) of the test server, and the URL parts to rebuild a proxied URL."""
    parts = urlsplit(server_url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname])[0]
    port = int(query.get("port", [parts.port or 5432])[0])
    return host, port, parts._replace(query="")


async def test_proxy_forwards_then_cut_breaks_the_connection_and_block_refuses_new_ones(server_url):
    host, port, parts = proxy_target(server_url)
    proxy = TcpProxy(host, port)
    local = proxy.start()
    url = parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{local}").geturl()
    try:
        conn = await asyncpg.connect(url)
        assert await conn.fetchval("SELECT 41 + 1") == 42
        proxy.cut()
        with pytest.raises((asyncpg.InterfaceError, asyncpg.PostgresConnectionError, ConnectionError, OSError)):
            await conn.fetchval("SELECT 1")
        proxy.block()
        with pytest.raises((asyncpg.PostgresConnectionError, ConnectionError, OSError)):
            await asyncpg.connect(url, timeout=2)
        proxy.block(False)
        again = await asyncpg.connect(url)
        assert await again.fetchval("SELECT 1") == 1
        await again.close()
    finally:
        proxy.stop()
