"""Slot starvation: one workspace's many agents must leave a worker process's push headroom to the others.

A worker process pushes at most ``push_inflight`` tasks at once, and a workspace alone never holds the last eighth
of those slots. Workspace B sets up several agents that never answer (real local HTTP servers that hold every
push far longer than the test waits) and queues many more tasks than there are slots; then workspace A's run
arrives. A's push must start at once, in one of the slots B could not take, and B must never hold more than
capacity minus headroom, whether the worker meets B's agents for the first time in a take (``new``), has
pushed to them before (``known``), or B's runs go the one-by-one way (``create_issue``, which makes an issue
first). The real delivery loop and push loop run in this process; the agents are real servers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookgate.context import open_context
from tests import factories
from tests.conftest import make_settings
from tests.servers import serving_app
from tests.worker.conftest import FAST, UNPACED, AgentServer, Hit, add_delivery, bulk_deliveries, push_loop, wait_for
from worker.deliveries import DeliveryWorker
from worker.fairshare import headroom

#: The process's push slots; B may hold all but the headroom.
CAPACITY = 16
B_MAX = CAPACITY - headroom(CAPACITY)
#: B's agents, and how many runs each has queued (far more than the slots).
B_AGENTS = 5
B_RUNS = 12
#: How long B's agents hold a push (their timeout is longer: each push keeps its slot all that time).
HANG_S = 30.0


@dataclass
class Held:
    """B's pushes its agents hold now, and the most they ever held at once."""

    now: int = 0
    peak: int = 0


@pytest.fixture
async def agents() -> AsyncIterator[tuple[AgentServer, Held]]:
    """Real agents on one loopback server: ``b*`` hold every push HANG_S (after a first quick one), others answer."""
    server, held = AgentServer(), Held()

    async def hang(n: int, _hit: Hit) -> Response:
        if n == 0 and server.behaviours.get("warm") is not None:
            return JSONResponse({"ok": True})  # the known variant: a first push that ends, so the worker knows it
        held.now += 1
        held.peak = max(held.peak, held.now)
        try:
            await asyncio.sleep(HANG_S)
        finally:
            held.now -= 1
        return JSONResponse({"ok": True})

    for i in range(B_AGENTS):
        server.behaviours[f"b{i}"] = hang
    app = Starlette(routes=[Route("/agent/{name}", server.handle, methods=["POST"])])
    async with serving_app(app) as base:
        server.base = base
        yield server, held


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", ["new", "known", "create_issue"])
async def test_many_agents_of_one_workspace_leave_the_headroom_to_another_workspace(
        db_url: str, agents: tuple[AgentServer, Held], variant: str) -> None:
    server, held = agents
    settings = make_settings(db_url, **(FAST | {"push_inflight": CAPACITY}))
    mode = "create_issue" if variant == "create_issue" else "run_only"
    async with open_context(settings, migrate=False) as ctx:
        b = await factories.world(ctx, "b")
        b_pilots, b_agents = [], []
        for i in range(B_AGENTS):
            agent = await factories.http_agent(b, url=server.url(f"b{i}"), name=f"b{i}", timeout_s=HANG_S + 30,
                                               max_concurrency=CAPACITY)
            b_agents.append(agent.row["id"])
            pilot = await factories.autopilot(b, agent.row["id"], mode=mode, title=f"b{i}")
            b_pilots.append((pilot, (await factories.webhook_trigger(b, pilot, **UNPACED))[0]))
        a = await factories.world(ctx, "a")
        a_agent = await factories.http_agent(a, url=server.url("a"), name="a")
        a_pilot = await factories.autopilot(a, a_agent.row["id"], title="a")
        a_trigger, _ = await factories.webhook_trigger(a, a_pilot, **UNPACED)

        async with push_loop(ctx, deadline=0.2) as (pusher, _pushes, wake):
            deliveries = DeliveryWorker(ctx, holder="t1", pusher=pusher, wake=wake)
            taking = asyncio.create_task(deliveries.run())
            try:
                if variant == "known":
                    server.behaviours["warm"] = server.behaviours["b0"]  # each b agent's first push ends at once
                    async with ctx.pool.acquire() as conn:
                        for pilot, trigger in b_pilots:
                            await add_delivery(conn, pilot, trigger)
                    await wait_for(lambda: all(server.of(f"b{i}") for i in range(B_AGENTS)), timeout=10)
                    await wait_for(lambda: not pusher.shares.inflight, timeout=10)
                    assert set(b_agents) <= set(pusher.shares.workspace_of)  # the worker knows them all now
                async with ctx.pool.acquire() as conn:
                    for pilot, trigger in b_pilots:
                        await bulk_deliveries(conn, pilot, trigger, B_RUNS)
                # B takes all it may, then stays there: every push it holds hangs.
                await wait_for(lambda: held.now >= B_MAX, timeout=15)
                await asyncio.sleep(0.5)
                assert held.peak <= B_MAX, f"workspace B held {held.peak} of {CAPACITY} slots"

                started = time.monotonic()
                async with ctx.pool.acquire() as conn:
                    await add_delivery(conn, a_pilot, a_trigger)
                await wait_for(lambda: server.of("a"), timeout=HANG_S / 2)
                took = time.monotonic() - started
                await asyncio.sleep(0.3)  # what A's push freed is not B's: B is at its part already
            finally:
                await deliveries.stop()
                await asyncio.wait_for(taking, 5)
    assert took < 2.0, f"workspace A's push waited {took:.2f} s behind B's hanging pushes"
    assert held.peak <= B_MAX, f"workspace B held {held.peak} of {CAPACITY} slots"
    assert held.peak == B_MAX  # and B did get all the rest

