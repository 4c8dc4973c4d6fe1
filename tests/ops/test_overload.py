"""Overload and outage: 503 + Retry-After within the bounded wait, recovery without a restart."""

import asyncio
import importlib.util
import time

import httpx
import pytest

from hookgate.context import open_context
from tests.conftest import asgi_client, make_settings
from tests.ops.conftest import Small, log_in

needs_ingress = pytest.mark.skipif(importlib.util.find_spec("gateway.ingress") is None,
                                   reason="needs gateway/ingress/ on this branch")


async def _timed(http: httpx.AsyncClient, method: str, path: str, **kw) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = await http.request(method, path, **kw)
    return answer, time.monotonic() - started


async def _recovers(http: httpx.AsyncClient, method: str, path: str, **kw) -> httpx.Response:
    """The first answer other than 503 once the database is back, within 10 s and without a restart.

    Each reconnect goes through ``pool_acquire_timeout`` (0.5 s here), which a loaded machine can overrun
    once; until then every answer must be the same clean 503.
    """
    deadline = time.monotonic() + 10.0
    while True:
        answer = await http.request(method, path, **kw)
        if answer.status_code != 503 or time.monotonic() > deadline:
            return answer
        assert answer.headers["retry-after"] and answer.json()["error"] == "unavailable"
        await asyncio.sleep(0.2)


async def test_dashboard_answers_503_while_the_database_is_down_and_recovers_by_itself(db_proxy, small: Small):
    proxy, url = db_proxy
    settings = make_settings(url, pool_min_size=1, pool_max_size=4, pool_acquire_timeout=0.5)
    async with open_context(settings, migrate=False) as ctx:
        async with asgi_client(ctx) as http:
            await log_in(http, small.world.api_key)
            proxy.block()
            proxy.cut()
            for _ in range(3):  # a broken pooled connection first, then failed reconnects
                answer, took = await _timed(http, "GET", "/dashboard")
                assert answer.status_code == 503 and took < 2.0
                assert answer.headers["retry-after"] == "5" and answer.json()["error"] == "unavailable"
            proxy.block(False)
            assert (await _recovers(http, "GET", "/dashboard")).status_code == 200


@needs_ingress
async def test_ingress_answers_503_quickly_when_the_pool_is_exhausted(db_url, small: Small):
    settings = make_settings(db_url, pool_max_size=2, pool_acquire_timeout=0.3)
    async with open_context(settings, migrate=False) as ctx:
        async with asgi_client(ctx, "203.0.113.9") as http:
            held = [await ctx.pool.acquire() for _ in range(2)]
            try:
                answer, took = await _timed(http, "POST", f"/hooks/{small.token}", json={"event": "a"})
            finally:
                for conn in held:
                    await ctx.pool.release(conn)
            assert answer.status_code == 503 and answer.headers["retry-after"] and took < 1.5
            again = await http.post(f"/hooks/{small.token}", json={"event": "a"})
            assert again.status_code == 200 and again.json()["status"] == "accepted"


@needs_ingress
async def test_ingress_answers_503_while_the_database_is_down_and_accepts_again_after(db_proxy, small: Small):
    proxy, url = db_proxy
    settings = make_settings(url, pool_min_size=1, pool_max_size=4, pool_acquire_timeout=0.5)
    async with open_context(settings, migrate=False) as ctx:
        async with asgi_client(ctx, "203.0.113.9") as http:
            assert (await http.post(f"/hooks/{small.token}", json={"n": 0})).status_code == 200
            proxy.block()
            proxy.cut()
            for n in range(3):
                answer, took = await _timed(http, "POST", f"/hooks/{small.token}", json={"n": n + 1})
                assert answer.status_code == 503 and answer.headers["retry-after"] and took < 2.0
            proxy.block(False)
            answer = await _recovers(http, "POST", f"/hooks/{small.token}", json={"n": 9})
            assert answer.status_code == 200 and answer.json()["status"] == "accepted"


async def test_admin_api_answers_503_quickly_when_the_pool_is_exhausted(db_url, small: Small):
    settings = make_settings(db_url, pool_max_size=2, pool_acquire_timeout=0.3)
    async with open_context(settings, migrate=False) as ctx:
        async with asgi_client(ctx) as http:
            held = [await ctx.pool.acquire() for _ in range(2)]
            try:
                answer, took = await _timed(http, "GET", "/v1/me", headers=small.world.auth)
            finally:
                for conn in held:
                    await ctx.pool.release(conn)
            assert answer.status_code == 503 and answer.headers["retry-after"] and took < 1.5
            assert (await http.get("/v1/me", headers=small.world.auth)).status_code == 200
