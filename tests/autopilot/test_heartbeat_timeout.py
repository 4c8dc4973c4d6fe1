"""Every way a run is admitted or dispatched judges a pull runtime by HOOKGATE_HEARTBEAT_TIMEOUT_S.

The agent's only instance heartbeated 100 s ago: with the setting at 60 s the run is skipped
``runtime_offline``, with it at 200 s it goes ahead, through ingress, the worker, the admin API, replays
and the scheduler alike (there is no hard-coded 120 s left to fall back on).
"""

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from autopilot import admission
from gateway.app import create_app, shutdown
from hookgate.context import Context, open_context
from scheduler.jobs import SCHEDULE_JOB
from scheduler.manager import Scheduler
from scheduler.role import default_jobs
from sql import Q
from tests import factories
from tests.conftest import make_settings
from worker.deliveries import DeliveryWorker
from worker.runs import RunWorker

DAY0 = datetime(2027, 2, 1, 9, 0, tzinfo=UTC)


@dataclass
class Case:
    """A world whose pull agent's one instance heartbeated 100 s ago, under one heartbeat timeout setting."""

    ctx: Context
    world: factories.World
    autopilot: Any
    offline: bool

    def check(self, run: Any) -> None:
        """Skipped runtime_offline under 60 s; not skipped (for that or any reason) under 200 s."""
        if self.offline:
            assert (run["status"], run["reason_code"]) == ("skipped", "runtime_offline")
        else:
            assert run["status"] != "skipped" and run["reason_code"] is None

    async def run_of(self, column: str, value: Any) -> Any:
        """The one run whose ``column`` is ``value``."""
        rows = await self.ctx.pool.fetch(f"SELECT * FROM autopilot_run WHERE {column} = $1", value)
        assert len(rows) == 1
        return rows[0]

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        """An HTTP client over this context's app."""
        app = create_app(self.ctx)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hooks.test") as http:
            yield http
        await shutdown(app)


@pytest.fixture(params=[60.0, 200.0], ids=["timeout-60s-offline", "timeout-200s-ready"])
async def case(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[Case]:
    """The world under HOOKGATE_HEARTBEAT_TIMEOUT_S = 60 or 200."""
    async with open_context(make_settings(db_url, heartbeat_timeout_s=request.param), migrate=False) as ctx:
        w = await factories.world(ctx)
        agent = await factories.pull_agent(w)
        ap = await factories.autopilot(w, agent.row["id"], mode="run_only")
        async with ctx.pool.acquire() as conn:
            await conn.execute(Q.instance_heartbeat, agent.row["id"], "box-1")
            await conn.execute("UPDATE agent_instance SET heartbeat_at = now() - interval '100 seconds' "
                               "WHERE agent_id = $1", agent.row["id"])
        yield Case(ctx, w, ap, offline=request.param < 100)


async def test_webhook_ingress_uses_the_setting(case):
    trigger, token = await factories.webhook_trigger(case.world, case.autopilot)
    async with case.client() as http:
        assert (await http.post(f"/hooks/{token}", json={"n": 1})).status_code == 200
    case.check(await case.run_of("trigger_id", trigger["id"]))


async def test_the_delivery_worker_admits_a_crash_window_delivery_with_the_setting(case):
    trigger, _ = await factories.webhook_trigger(case.world, case.autopilot)
    # what ingress stored before a crash: no run yet
    delivery = await factories.delivery(case.ctx.pool, trigger, event="push", signature_status="valid",
                                        envelope={"event": "push", "payload": {}})
    await DeliveryWorker(case.ctx, holder="t1").run_once()
    case.check(await case.run_of("webhook_delivery_id", delivery))


async def test_the_run_worker_dispatches_with_the_setting(case):
    async with case.ctx.pool.acquire() as conn:  # admitted while the runtime was fresh enough for anyone
        adm = await admission.admit(conn, autopilot_id=case.autopilot["id"], source="api", payload={},
                                    heartbeat_timeout_s=3600.0)
    assert adm.status == "pending"
    await RunWorker(case.ctx, holder="t1").run_once()
    case.check(await case.run_of("id", adm.run_id))


async def test_the_admin_apis_manual_run_uses_the_setting(case):
    async with case.client() as http:
        made = await http.post(f"/v1/autopilots/{case.autopilot['id']}/runs", headers=case.world.auth,
                               json={"source": "manual"})
    assert made.status_code == 201
    case.check(await case.run_of("id", made.json()["run_id"]))


async def test_a_replay_uses_the_setting(case):
    trigger, token = await factories.webhook_trigger(case.world, case.autopilot)
    async with case.client() as http:
        await http.post(f"/hooks/{token}", json={"n": 1})
        original = await case.ctx.pool.fetchval("SELECT id FROM webhook_delivery WHERE trigger_id = $1", trigger["id"])
        replayed = await http.post(f"/v1/deliveries/{original}/replay", headers=case.world.auth)
    assert replayed.status_code == 201
    case.check(await case.run_of("id", replayed.json()["run_id"]))


async def test_the_schedulers_schedule_dispatch_uses_the_setting(case):
    trigger = await factories.schedule_trigger(case.world, case.autopilot, "0 9 * * *", DAY0)
    jobs = [job for job in default_jobs(case.ctx.settings) if job.name == SCHEDULE_JOB]
    await Scheduler(case.ctx.pool, jobs).run_once(DAY0 + timedelta(seconds=2))
    case.check(await case.run_of("trigger_id", trigger["id"]))
