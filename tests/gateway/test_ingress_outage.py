"""A database that goes away mid-traffic: 503 with Retry-After, never a 2xx, and recovery after."""

from urllib.parse import urlsplit

import asyncpg

from tests.chaos.proxy import TcpProxy
from tests.chaos.test_proxy import proxy_target
from tests.gateway import ingress_kit as kit


async def test_cut_database_connections_answer_503_then_recover(db_url, server_url):
    host, port, parts = proxy_target(server_url)
    proxy = TcpProxy(host, port)
    local = proxy.start()
    name = urlsplit(db_url).path.lstrip("/")
    proxied = parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{local}", path=f"/{name}").geturl()
    try:
        async with kit.app_client(proxied, pool_acquire_timeout=0.5) as (ctx, client):
            h = await kit.hook(ctx)
            raw, headers = kit.github({"action": "opened"})
            assert (await client.post(h.path, content=raw, headers=headers)).status_code == 200
            proxy.block()
            proxy.cut()
            down = [kit.github({"action": f"a{n}"}) for n in range(3)]
            for raw, headers in down:
                r = await client.post(h.path, content=raw, headers=headers)
                assert r.status_code == 503 and r.json()["error"] == "unavailable"
                assert int(r.headers["retry-after"]) >= 1
            proxy.block(False)
            raw, headers = down[0]  # the provider retries: now it is stored, once
            statuses = [(await client.post(h.path, content=raw, headers=headers)).status_code for _ in range(3)]
            assert statuses[-1] == 200 and set(statuses) <= {200, 503}
        conn = await asyncpg.connect(db_url)
        try:
            keys = [r["dedupe_key"] for r in await conn.fetch("SELECT dedupe_key FROM webhook_delivery")]
        finally:
            await conn.close()
        assert len(keys) == 2 and down[0][1]["x-github-delivery"] in keys
    finally:
        proxy.stop()
