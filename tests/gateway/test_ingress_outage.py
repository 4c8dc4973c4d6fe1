"""A database that goes away mid-traffic: 503 with Retry-After, never a 2xx, and recovery after."""

import asyncio
from urllib.parse import urlsplit

import asyncpg

from tests.chaos.proxy import TcpProxy
from tests.chaos.test_proxy import proxy_target
from tests.gateway import ingress_kit as kit

STORED = "SELECT id::text FROM webhook_delivery WHERE dedupe_key = $1"


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


async def test_a_commit_whose_answer_is_lost_is_answered_503_and_its_retry_names_the_stored_one(db_url, server_url):
    """The connection breaks after the delivery committed but before ingress heard so (a primary lost mid-commit).

    The outcome is unknown to ingress, so it must not answer 2xx (nor 500): 503 + Retry-After, and the
    provider's retry is answered 200 ``duplicate`` naming the delivery that did commit, never a second one.
    """
    host, port, parts = proxy_target(server_url)
    proxy = TcpProxy(host, port)
    local = proxy.start()
    name = urlsplit(db_url).path.lstrip("/")
    proxied = parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{local}", path=f"/{name}").geturl()
    direct = await asyncpg.connect(db_url)
    try:
        # One pooled connection, warmed by a first request: the frozen one then has only its insert to send.
        async with kit.app_client(proxied, pool_acquire_timeout=0.5, pool_min_size=1, pool_max_size=1) as (ctx, client):
            h = await kit.hook(ctx)
            loop = asyncio.get_running_loop()
            for attempt in range(20):
                warm, headers = kit.github({"action": f"warm{attempt}"})
                sent = loop.time()
                assert (await client.post(h.path, content=warm, headers=headers)).status_code == 200
                # Its wake-up sent and answered (after the commit, or in it when written alone): the connection is
                # free for the next.
                await client._transport.app.state.ingress.notifier.settled()  # type: ignore[attr-defined]
                # The trigger's lookup is cached for a second: on a slow machine it can run out before the next
                # request, whose lookup would then be the statement frozen below instead of its insert. Warm again.
                if loop.time() - sent < 0.5:
                    break
            raw, headers = kit.github({"action": "opened"})
            proxy.freeze(answers_only=True)
            post = asyncio.create_task(client.post(h.path, content=raw, headers=headers))
            stored = None
            for _ in range(500):
                if (stored := await direct.fetchval(STORED, headers["x-github-delivery"])) is not None:
                    break
                await asyncio.sleep(0.01)
            proxy.cut()
            proxy.freeze(False)
            assert stored is not None, "the statement never committed"
            first = await post
            assert first.status_code == 503 and first.json()["error"] == "unavailable"
            assert int(first.headers["retry-after"]) >= 1
            retry = await client.post(h.path, content=raw, headers=headers)
            assert retry.status_code == 200
            assert retry.json()["status"] == "duplicate" and retry.json()["delivery_id"] == stored
        assert await direct.fetchval(STORED.replace("id::text", "count(*)"), headers["x-github-delivery"]) == 1
    finally:
        await direct.close()
        proxy.stop()
