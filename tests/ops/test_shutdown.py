"""SIGTERM during a load run loses nothing: every accepted delivery is dispatched after a restart."""

import asyncio
import importlib.util
import signal
import time

import httpx
import pytest

from hookgate.context import Context
from tests import factories
from tests.ops.conftest import Small

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gateway.ingress") is None or importlib.util.find_spec("worker.deliveries") is None,
    reason="needs the ingress and the delivery worker on this branch",
)
FAST_STOP = {"HOOKGATE_SHUTDOWN_DEADLINE": "5"}


async def _load(url: str, token: str, count: int, accepted: list[str], stop_after: dict[int, asyncio.Event]) -> None:
    """Post ``count`` webhooks, 4 at a time; record the delivery id of every 200 accepted answer."""
    sent = 0

    async def one(http: httpx.AsyncClient) -> None:
        nonlocal sent
        while sent < count:
            sent += 1
            if sent in stop_after:
                stop_after[sent].set()
            try:
                answer = await http.post(f"{url}/hooks/{token}", json={"event": "load", "n": sent}, timeout=5)
            except httpx.HTTPError:
                continue  # the gateway is going away: not accepted, the provider would retry
            if answer.status_code == 200 and answer.json()["status"] == "accepted":
                accepted.append(answer.json()["delivery_id"])

    async with httpx.AsyncClient() as http:
        await asyncio.gather(*(one(http) for _ in range(4)))


async def _settled(ctx: Context, ids: list[str], timeout: float) -> list[str]:
    """Poll until every delivery in ``ids`` is dispatched with a run; returns those still not."""
    deadline = time.monotonic() + timeout
    while True:
        rows = await ctx.pool.fetch(
            "SELECT id::text FROM webhook_delivery WHERE id::text = ANY($1) AND status = 'dispatched'"
            " AND run_id IS NOT NULL", ids)
        missing = sorted(set(ids) - {r["id"] for r in rows})
        if not missing or time.monotonic() > deadline:
            return missing
        await asyncio.sleep(0.1)


async def test_sigterm_of_worker_and_gateway_under_load_loses_no_accepted_delivery(spawn, ctx: Context, small: Small):
    # A trigger paced high enough that pacing (60/min by default) does not stretch the drain.
    _, token = await factories.webhook_trigger(small.world, small.autopilot, rate_limit_per_minute=100_000)
    gateway = spawn.start("gateway", gateway=True, extra_env=FAST_STOP)
    worker = spawn.start("worker", extra_env=FAST_STOP)
    await asyncio.to_thread(gateway.wait_ready)
    # The line a role logs once its signal handlers are set (a SIGTERM before it takes Python's default action).
    await asyncio.to_thread(worker.wait_logged, "durability:")
    accepted: list[str] = []
    stop_worker, stop_gateway = asyncio.Event(), asyncio.Event()
    load = asyncio.create_task(_load(gateway.url, token, 150, accepted, {40: stop_worker, 110: stop_gateway}))
    await stop_worker.wait()
    worker.signal(signal.SIGTERM)
    await stop_gateway.wait()
    gateway.signal(signal.SIGTERM)
    await load
    assert await asyncio.to_thread(worker.wait, 15) == 0, worker.output()
    assert await asyncio.to_thread(gateway.wait, 15) == 0, gateway.output()
    assert len(accepted) >= 40
    held = await ctx.pool.fetchval("SELECT count(*) FROM webhook_delivery WHERE status = 'queued' "
                                   "AND lease_expires_at > now()")
    assert held == 0, "a stopped worker must release (not keep) its delivery leases"
    spawn.start("worker")
    missing = await _settled(ctx, accepted, timeout=30)
    states = await ctx.pool.fetch("SELECT status, reason_code, run_id IS NOT NULL AS has_run, count(*) "
                                  "FROM webhook_delivery WHERE id::text = ANY($1) GROUP BY 1, 2, 3", missing)
    assert missing == [], [dict(r) for r in states]
    runs = await ctx.pool.fetchval("SELECT count(*) FROM autopilot_run WHERE webhook_delivery_id::text = ANY($1)",
                                   accepted)
    assert runs == len(accepted)
