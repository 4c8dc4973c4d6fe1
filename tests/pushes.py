"""Runs that really failed: pushed by the real push worker to a real local agent answering 502.

For tests of what operators read about failed deliveries (CLI, dashboard): the attempts, the agent's
health and the run's status are written by the worker's own code, not by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from autopilot import agents
from hookgate.context import Context
from tests import factories
from tests.servers import serving_app
from worker.push import Pusher, PushWorker

#: What the agent answers every push: a 502 with this body (kept as the attempt's response excerpt).
ANSWER = {"error": "upstream down"}
#: The failing agent's own retry schedule: two attempts, 50 ms apart.
SCHEDULE = [0.05]


async def _refuse(_request: Request) -> Response:
    return JSONResponse(ANSWER, status_code=502)


@contextlib.asynccontextmanager
async def failing_agent() -> AsyncIterator[str]:
    """A real loopback HTTP agent answering every push 502; yields its URL."""
    app = Starlette(routes=[Route("/agent", _refuse, methods=["POST"])])
    async with serving_app(app) as base:
        yield f"{base}/agent"


async def failed_run(ctx: Context, autopilot_id: Any, agent_id: Any, url: str, *, timeout: float = 20.0) -> UUID:
    """Point the agent at ``url`` with a two-attempt schedule, start an api run and push it until it fails.

    Returns the run's id once its status is ``failed`` (both attempts answered 502).
    """
    async with ctx.pool.acquire() as conn:
        await agents.update_agent(conn, agent_id, agents.AgentChange(url=url, retry_schedule=SCHEDULE))
        run_id: UUID = await factories.dispatched_run(conn, autopilot_id)
    await push_until(ctx, run_id, "failed", timeout=timeout)
    return run_id


async def push_until(ctx: Context, run_id: UUID, status: str, *, timeout: float = 20.0) -> None:
    """Run the push worker's passes until the run has ``status`` (fails after ``timeout`` seconds)."""
    pusher = Pusher(ctx, holder="test-pushes")
    pushes = PushWorker(ctx, holder="test-pushes", pusher=pusher)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while True:
            await pushes.run_once()
            now = await ctx.pool.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id)
            if now == status:
                return
            if loop.time() > deadline:
                raise AssertionError(f"run {run_id} is {now}, not {status}, after {timeout} s")
            await asyncio.sleep(0.03)
    finally:
        await pusher.stop(deadline=5)
