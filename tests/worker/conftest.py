"""Fixtures for dispatch tests: a real local HTTP agent server, fast worker settings, delivery builders."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from autopilot import admission
from hookgate import notify
from hookgate.context import Context, open_context
from hookgate.notify import NotifyListener
from tests import factories
from tests.conftest import make_settings
from tests.servers import serving_app
from worker.push import Pusher, PushWorker

#: Worker settings that make retries and polls fast enough for tests.
FAST = {
    "worker_poll_s": 0.1, "push_retry_schedule": "0.02,0.04,0.08,0.1",
    "delivery_backoff_base_s": 0.01, "delivery_backoff_cap_s": 0.05, "watchdog_interval_s": 0.2,
}
#: A webhook trigger's pacing far above what a test sends.
UNPACED = {"rate_limit_per_minute": 100000}


@dataclass
class Hit:
    """One request an agent received."""

    name: str
    headers: dict[str, str]
    raw: bytes
    #: The request itself, for behaviours that watch the connection (e.g. wait for the client to hang up).
    request: Request | None = field(default=None, repr=False, compare=False)

    @property
    def body(self) -> Any:
        return json.loads(self.raw)


Behaviour = Callable[[int, Hit], Awaitable[Response]]


async def ok(_n: int, _hit: Hit) -> Response:
    return JSONResponse({"ok": True})


def answer(response: Response) -> Behaviour:
    """A behaviour answering every request with ``response``."""

    async def behave(_n: int, _hit: Hit) -> Response:
        return response

    return behave


@dataclass
class AgentServer:
    """Real HTTP agents on one loopback server: ``url(name)``; per-name behaviour; every hit recorded."""

    base: str = ""
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)
    inflight: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)

    def url(self, name: str) -> str:
        return f"{self.base}/agent/{name}"

    def of(self, name: str) -> list[Hit]:
        return [h for h in self.hits if h.name == name]

    async def handle(self, request: Request) -> Response:
        name = request.path_params["name"]
        hit = Hit(name, dict(request.headers), await request.body(), request)
        n = len(self.of(name))
        self.hits.append(hit)
        self.inflight[name] = self.inflight.get(name, 0) + 1
        self.peak[name] = max(self.peak.get(name, 0), self.inflight[name])
        try:
            return await self.behaviours.get(name, ok)(n, hit)
        finally:
            self.inflight[name] -= 1


@pytest.fixture
async def agent_server() -> AsyncIterator[AgentServer]:
    server_state = AgentServer()
    app = Starlette(routes=[Route("/agent/{name}", server_state.handle, methods=["POST"])])
    async with serving_app(app) as base:
        server_state.base = base
        yield server_state


@pytest.fixture
async def wctx(db_url: str) -> AsyncIterator[Context]:
    """A context with fast worker settings."""
    async with open_context(make_settings(db_url, **FAST), migrate=False) as context:
        yield context


async def agent_world(ctx: Context, url: str, *, workspace: str = "acme", autopilot: dict[str, Any] | None = None,
                      trigger: dict[str, Any] | None = None, **agent_kw: Any) -> factories.Small:
    """A workspace with an HTTP agent at ``url`` (``agent_kw``: name, timeout, …), an autopilot and a webhook trigger.

    ``autopilot`` and ``trigger`` are keyword arguments of ``factories.autopilot`` and ``factories.webhook_trigger``.
    """
    w = await factories.world(ctx, workspace)
    agent = await factories.http_agent(w, url=url, **agent_kw)
    pilot = await factories.autopilot(w, agent.row["id"], **(autopilot or {}))
    made, token = await factories.webhook_trigger(w, pilot, **(trigger or {}))
    return factories.Small(w, agent, pilot, made, token)


@contextlib.asynccontextmanager
async def push_loop(ctx: Context, *, deadline: float, loop: type[PushWorker] = PushWorker,
                    ) -> AsyncIterator[tuple[Pusher, PushWorker, NotifyListener]]:
    """Yields a pusher, a push loop (``loop``) running with their listener until the block ends, and the listener.

    The pusher is stopped after the loop, with ``deadline``.
    """
    wake = NotifyListener(ctx.dsn)
    pusher = Pusher(ctx, holder="t1", wake=wake)
    pushes = loop(ctx, holder="t1", pusher=pusher, wake=wake)
    await wake.ensure()
    running = asyncio.create_task(pushes.run())
    try:
        yield pusher, pushes, wake
    finally:
        await pushes.stop()
        wake.poke(notify.TASKS)
        await asyncio.wait_for(running, 5)
        await pusher.stop(deadline=deadline)
        await wake.close()


async def add_delivery(conn: Any, ap: Any, trigger: Any, *, event: str = "push", admit: bool = True,
                       payload: Any = None) -> tuple[Any, Any]:
    """What ingress stores: a queued delivery, and (when ``admit``) its admitted run. Returns ids."""
    envelope = {"event": event, "payload": payload or {"n": 1}, "request": {}}
    delivery = await conn.fetchval(
        """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, provider, event, envelope,
                                         signature_status)
           VALUES ($1, $2, $3, 'generic', $4, $5, 'valid') RETURNING id""",
        ap["workspace_id"], trigger["id"], ap["id"], event, envelope)
    run_id = None
    if admit:
        result = await admission.admit(conn, autopilot_id=ap["id"], source="webhook", payload=envelope,
                                       trigger_id=trigger["id"], delivery_id=delivery, heartbeat_timeout_s=120.0)
        run_id = result.run_id
        await conn.execute("UPDATE webhook_delivery SET run_id = $2 WHERE id = $1", delivery, run_id)
    return delivery, run_id


async def bulk_deliveries(conn: Any, ap: Any, trigger: Any, count: int) -> None:
    """``count`` queued deliveries with admitted pending runs, inserted in one transaction (race tests).

    One transaction, as ingress stores a delivery and its run atomically: a worker polling between the two
    statements would otherwise take the deliveries as crash-window ones and admit runs the second one inserts.
    """
    async with conn.transaction():
        await _bulk_deliveries(conn, ap, trigger, count)


async def _bulk_deliveries(conn: Any, ap: Any, trigger: Any, count: int) -> None:
    await conn.execute(
        """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, provider, event, envelope,
                                         signature_status, dedupe_key)
           SELECT $1, $2, $3, 'generic', 'push', jsonb_build_object('event', 'push', 'payload',
                  jsonb_build_object('n', g)), 'valid', 'k' || g
           FROM generate_series(1, $4) g""", ap["workspace_id"], trigger["id"], ap["id"], count)
    await conn.execute(
        """WITH runs AS (
               INSERT INTO autopilot_run (workspace_id, autopilot_id, trigger_id, webhook_delivery_id, source,
                                          rule_version_id, payload, accountable_id)
               SELECT d.workspace_id, d.autopilot_id, d.trigger_id, d.id, 'webhook',
                      (SELECT id FROM autopilot_rule_version WHERE autopilot_id = d.autopilot_id
                       ORDER BY version DESC LIMIT 1), d.envelope, $2
               FROM webhook_delivery d WHERE d.trigger_id = $1 AND d.run_id IS NULL
               RETURNING id, webhook_delivery_id)
           UPDATE webhook_delivery d SET run_id = runs.id FROM runs WHERE d.id = runs.webhook_delivery_id""",
        trigger["id"], trigger["published_by_id"])


async def wait_for(predicate: Callable[[], Awaitable[bool] | bool], timeout: float = 20.0, every: float = 0.05) -> None:
    """Poll a condition (a plain or an async callable) until true (fails the test after ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await _value(predicate()):
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(every)


async def _value(result: Awaitable[bool] | bool) -> bool:
    return await result if inspect.isawaitable(result) else result
