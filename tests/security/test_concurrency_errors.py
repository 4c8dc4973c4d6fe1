"""Concurrency never surfaces as a 5xx: replays racing the delivery worker, and real deadlocks at the edge."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import asyncpg
import httpx
import pytest

from gateway.app import create_app, shutdown
from hookgate import database
from hookgate.context import Context, open_context
from tests import factories
from tests.conftest import make_settings
from tests.worker.conftest import FAST, AgentServer, agent_server  # noqa: F401  (the fixture)
from worker.deliveries import DeliveryWorker
from worker.push import Pusher

REPLAYS = 200


async def _deadlocks(conn: asyncpg.Connection) -> int:
    """Deadlocks PostgreSQL detected in this database so far (its statistics are flushed at commit)."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(await conn.fetchval("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))


async def _original(conn: asyncpg.Connection, w: factories.World, ap: Any, trigger: Any) -> Any:
    """A delivery as ingress stores it, already dispatched (the one a user replays)."""
    envelope = {"event": "push", "payload": {"n": 1}, "request": {}}
    return await conn.fetchval(
        """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, body, content_type, envelope,
                                         provider, event, signature_status, status)
           VALUES ($1, $2, $3, $4, 'application/json', $5, 'generic', 'push', 'valid', 'dispatched')
           RETURNING id""",
        w.workspace_id, trigger["id"], ap["id"], json.dumps({"n": 1}).encode(), envelope)


def _transport(app: Any) -> httpx.ASGITransport:
    """Over ASGI, answering as a server would: an unhandled error is the 500 a client gets, not a raise."""
    return httpx.ASGITransport(app=app, raise_app_exceptions=False)


@pytest.fixture
async def busy(db_url: str) -> Any:
    """A context whose worker polls fast; its pool is big enough for the workers and the replays."""
    async with open_context(make_settings(db_url, pool_max_size=20, **FAST), migrate=False) as context:
        yield context


async def test_replays_racing_the_delivery_workers_never_deadlock_nor_answer_5xx(
    busy: Context, agent_server: AgentServer, caplog: pytest.LogCaptureFixture,  # noqa: F811
) -> None:
    w = await factories.world(busy)
    agent = await factories.http_agent(w, url=agent_server.url("a"), name="a", max_concurrency=50)
    ap = await factories.autopilot(w, agent.row["id"])
    trigger, _ = await factories.webhook_trigger(w, ap, rate_limit_per_minute=100000)
    async with busy.pool.acquire() as conn:
        original = await _original(conn, w, ap, trigger)
        before = await _deadlocks(conn)
    pushers = [Pusher(busy, holder=f"w{i}") for i in range(2)]
    workers = [DeliveryWorker(busy, holder=f"w{i}", pusher=p) for i, p in enumerate(pushers)]
    roles = [asyncio.create_task(r.run()) for r in [*pushers, *workers]]
    app = create_app(busy)
    statuses: list[int] = []
    try:
        async with httpx.AsyncClient(transport=_transport(app), base_url="http://hooks.test") as http:
            gate = asyncio.Semaphore(4)

            latest = [original]

            async def replay() -> None:
                async with gate:
                    # Replay the newest delivery: it is queued, so the workers are taking it right now.
                    got = await http.post(f"/v1/deliveries/{latest[-1]}/replay", headers=w.auth)
                    statuses.append(got.status_code)
                    if got.status_code == 201:
                        latest.append(got.json()["delivery_id"])

            with caplog.at_level(logging.WARNING):
                await asyncio.gather(*(replay() for _ in range(REPLAYS)))
                await asyncio.sleep(0.5)
    finally:
        for role in [*workers, *pushers]:
            await role.stop()
        await asyncio.wait_for(asyncio.gather(*roles), 20)
        await shutdown(app)
    async with busy.pool.acquire() as conn:
        after = await _deadlocks(conn)
        made = await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE replayed_from_delivery_id IS NOT NULL")
    assert [s for s in statuses if s != 201] == []
    assert made == REPLAYS
    assert after - before == 0, f"{after - before} deadlocks detected by PostgreSQL"
    assert not [r for r in caplog.records if "deadlock" in str(r.__dict__).lower()]
