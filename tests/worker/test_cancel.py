"""Cancellation reaches running work, deadlines end overdue runs, a retry runs a failed run again.

Real local HTTP agents (tests/worker/conftest.py), the real admin and runtime APIs over ASGI, the real
LISTEN/NOTIFY path: a cancel's NOTIFY on ``hookgate_cancels`` is what aborts a push in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
import pytest
from starlette.responses import JSONResponse, Response

from autopilot import admission, dispatch
from hookgate import notify
from hookgate.context import Context
from hookgate.notify import NotifyListener
from scheduler import maintenance
from scheduler.maintenance import deadlines
from tests import factories
from tests.conftest import asgi_client, make_settings
from tests.worker.conftest import AgentServer, Hit, add_delivery, agent_world, wait_for
from worker.deliveries import DeliveryWorker
from worker.push import Pusher, PushWorker

#: The agents' own timeout: an aborted push must end well before it.
AGENT_TIMEOUT_S = 30.0


@pytest.fixture
async def api(wctx: Context) -> AsyncIterator[httpx.AsyncClient]:
    """The admin and runtime APIs over ASGI, on the worker test context."""
    async with asgi_client(wctx, "203.0.113.9") as http:
        yield http


class Hang:
    """An agent behaviour that never answers: it waits for the client to hang up and records how long it took."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.closed = asyncio.Event()
        self.waited: list[float] = []

    async def __call__(self, _n: int, hit: Hit) -> Response:
        assert hit.request is not None
        self.started.set()
        began = time.monotonic()
        while (await hit.request.receive())["type"] != "http.disconnect":
            pass
        self.waited.append(time.monotonic() - began)
        self.closed.set()
        return Response(status_code=200)


@asynccontextmanager
async def _pushing(wctx, agent_server, hang, **autopilot_kw):
    """A run whose push is in flight to a hanging agent, with a listening pusher. Yields ids and the pusher."""
    agent_server.behaviours["a"] = hang
    s = await agent_world(wctx, agent_server.url("a"), name="a", timeout_s=AGENT_TIMEOUT_S, autopilot=autopilot_kw)
    wake = NotifyListener(wctx.dsn)
    await wake.ensure()
    pusher = Pusher(wctx, holder="t1", wake=wake)
    try:
        async with wctx.pool.acquire() as conn:
            _, run_id = await add_delivery(conn, s.autopilot, s.trigger)
        assert await DeliveryWorker(wctx, holder="t1", pusher=pusher).run_once() == 1
        await asyncio.wait_for(hang.started.wait(), 10)
        async with wctx.pool.acquire() as conn:
            task_id = await conn.fetchval("SELECT id FROM agent_task WHERE run_id = $1", run_id)
        yield s.world, run_id, task_id, pusher
    finally:
        await pusher.stop(deadline=5)
        await wake.close()


async def _aborted(wctx, hang, pusher, task_id):
    """The agent saw its connection close well before its timeout; the push ended and wrote nothing."""
    await asyncio.wait_for(hang.closed.wait(), 10)
    assert hang.waited[0] < AGENT_TIMEOUT_S / 3
    await wait_for(lambda: pusher.capacity() == wctx.settings.push_inflight, timeout=10)
    async with wctx.pool.acquire() as conn:
        task = await conn.fetchrow("SELECT * FROM agent_task WHERE id = $1", task_id)
        releases = await conn.fetchval("SELECT count(*) FROM audit_log WHERE subject_id = $1 AND action IN "
                                       "('RELEASE', 'LATE_RESULT')", str(task_id))
    assert (task["status"], task["lease_token"], task["result"]) == ("cancelled", None, None)
    assert releases == 0


async def test_cancelling_a_run_aborts_its_push_in_flight_and_the_task_stays_cancelled(wctx, agent_server, api):
    hang = Hang()
    async with _pushing(wctx, agent_server, hang) as (w, run_id, task_id, pusher):
        cancelled = await api.post(f"/v1/runs/{run_id}/cancel", headers=w.auth, json={})
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        await _aborted(wctx, hang, pusher, task_id)
    async with wctx.pool.acquire() as conn:
        run = await conn.fetchrow("SELECT status, reason_code FROM autopilot_run WHERE id = $1", run_id)
        audit = await conn.fetchrow("SELECT detail FROM audit_log WHERE action = 'RUN_CANCEL'")
        task_cancel = await conn.fetchrow("SELECT detail FROM audit_log WHERE action = 'TASK_CANCEL'")
    assert (run["status"], run["reason_code"]) == ("cancelled", "cancelled_by_member")
    assert audit["detail"] == {"previous_status": "running", "tasks_cancelled": 1}
    assert task_cancel["detail"] == {"reason": "run_cancelled", "was": "running"}
    assert len(agent_server.of("a")) == 1  # not pushed again
    async with wctx.pool.acquire() as conn:  # the aborted push is one attempt, recorded by the pusher
        attempts = await conn.fetch("SELECT attempt, outcome FROM task_attempt WHERE task_id = $1", task_id)
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "cancelled")]


async def test_a_pull_runtime_holding_a_cancelled_task_gets_409_cancelled_on_renew_and_report(wctx, api):
    w = await factories.world(wctx)
    agent = await factories.pull_agent(w)
    ap = await factories.autopilot(w, agent.row["id"])
    auth = {"Authorization": f"Bearer {agent.runtime_token}"}
    assert (await api.post("/v1/runtime/heartbeat", headers=auth, json={})).status_code == 200
    async with wctx.pool.acquire() as conn:
        adm = await admission.admit(conn, autopilot_id=ap["id"], source="api", payload={}, heartbeat_timeout_s=120)
        await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    claimed = (await api.post("/v1/runtime/claim", headers=auth, json={})).json()
    task_id, token = claimed["task"]["id"], claimed["lease_token"]
    assert (await api.post(f"/v1/runs/{adm.run_id}/cancel", headers=w.auth, json={})).status_code == 200
    renew = await api.post(f"/v1/runtime/tasks/{task_id}/renew", headers=auth, json={"lease_token": token})
    report = await api.post(f"/v1/runtime/tasks/{task_id}/report", headers=auth,
                            json={"lease_token": token, "status": "succeeded"})
    stale = await api.post(f"/v1/runtime/tasks/{task_id}/report", headers=auth,
                           json={"lease_token": "0190e0a0-0000-7000-8000-000000000000", "status": "succeeded"})
    assert (renew.status_code, renew.json()["error"]) == (409, "cancelled")
    assert (report.status_code, report.json()["error"]) == (409, "cancelled")
    assert (stale.status_code, stale.json()["error"]) == (409, "lease_lost")  # only the holder is told
    async with wctx.pool.acquire() as conn:
        task = await conn.fetchrow("SELECT status, result FROM agent_task WHERE id = $1", task_id)
        run = await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", adm.run_id)
    assert (task["status"], task["result"], run) == ("cancelled", None, "cancelled")
    # The lease the cancel ended is kept as a 'cancelled' attempt; the refused renew and report add none.
    attempts = (await api.get(f"/v1/tasks/{task_id}/attempts", headers=w.auth)).json()["items"]
    assert [(a["attempt"], a["outcome"], a["error"]) for a in attempts] == [(1, "cancelled", "the run was cancelled")]
    assert attempts[0]["duration_ms"] >= 0 and attempts[0]["run_id"] == str(adm.run_id)
    # The runtime's claims go on as before: nothing to claim now.
    assert (await api.post("/v1/runtime/claim", headers=auth, json={"wait_s": 0.2})).status_code == 204


async def test_a_run_past_its_deadline_fails_and_its_push_in_flight_is_aborted(wctx, agent_server):
    hang = Hang()
    async with _pushing(wctx, agent_server, hang, run_timeout_s=60) as (_w, run_id, task_id, pusher):
        async with wctx.pool.acquire() as conn:
            early = await deadlines.sweep(conn)
            assert early == deadlines.Sweep(0, 0)
            later = await conn.fetchval("SELECT now() + interval '61 seconds'")
            swept = await deadlines.sweep(conn, now=later)
        assert swept == deadlines.Sweep(runs_failed=1, tasks_cancelled=1)
        await _aborted(wctx, hang, pusher, task_id)
    async with wctx.pool.acquire() as conn:
        run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
    assert (run["status"], run["reason_code"]) == ("failed", "deadline_exceeded") and run["finished_at"]
    assert "60 s" in run["reason"]


async def test_concurrent_deadline_sweeps_end_each_overdue_run_once(wctx):
    w = await factories.world(wctx)
    agent = await factories.http_agent(w)
    timed = await factories.autopilot(w, agent.row["id"], run_timeout_s=5)
    untimed = await factories.autopilot(w, agent.row["id"], title="no deadline")
    async with wctx.pool.acquire() as conn:
        runs = []
        for ap in [timed] * 40 + [untimed] * 3:
            adm = await admission.admit(conn, autopilot_id=ap["id"], source="api", payload={},
                                        heartbeat_timeout_s=120)
            await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0))
            runs.append(adm.run_id)
        later = await conn.fetchval("SELECT now() + interval '6 seconds'")

    async def one_sweep():
        async with wctx.pool.acquire() as conn:
            return await deadlines.sweep(conn, now=later, batch=3)

    results = await asyncio.gather(*(one_sweep() for _ in range(3)))
    assert sum(r.runs_failed for r in results) == 40 and sum(r.tasks_cancelled for r in results) == 40
    async with wctx.pool.acquire() as conn:
        statuses = dict(await conn.fetch("SELECT status, count(*) FROM autopilot_run GROUP BY status"))
        per_run = await conn.fetch("SELECT subject_id, count(*) FROM audit_log WHERE action = 'RUN_DEADLINE' "
                                   "GROUP BY subject_id")
        per_task = await conn.fetchval("SELECT count(*) FROM audit_log WHERE action = 'TASK_CANCEL'")
    assert statuses == {"failed": 40, "queued": 3}
    assert len(per_run) == 40 and {r["count"] for r in per_run} == {1}
    assert per_task == 40


def test_the_deadline_sweep_is_a_maintenance_job_every_deadline_sweep_s(db_url):
    jobs = {j.name: j for j in maintenance.jobs(make_settings(db_url, deadline_sweep_s=2))}
    assert jobs["run_deadlines"].cadence.interval == timedelta(seconds=2)
    assert {j.name for j in maintenance.jobs(make_settings(db_url))} >= {"run_deadlines", "lease_watchdog"}
    assert make_settings(db_url).deadline_sweep_s == 5
    assert notify.CANCELS in notify.WORKER_CHANNELS


async def test_retrying_a_failed_run_pushes_again_and_the_agent_now_succeeds(wctx, agent_server, api):
    async def fails_then_works(n, _hit):
        return Response(status_code=404) if n == 0 else JSONResponse({"fixed": True})

    agent_server.behaviours["a"] = fails_then_works
    s = await agent_world(wctx, agent_server.url("a"), name="a")
    pusher = Pusher(wctx, holder="t1")
    async with wctx.pool.acquire() as conn:
        _, run_id = await add_delivery(conn, s.autopilot, s.trigger)
    await DeliveryWorker(wctx, holder="t1", pusher=pusher).run_once()
    await wait_for(lambda: pusher.capacity() == wctx.settings.push_inflight)
    failed = (await api.get(f"/v1/runs/{run_id}", headers=s.world.auth)).json()
    assert (failed["status"], failed["reason_code"]) == ("failed", "task_failed")

    retried = await api.post(f"/v1/runs/{run_id}/retry", headers=s.world.auth)
    assert retried.status_code == 202 and retried.json()["attempt"] == 2
    pushes = PushWorker(wctx, holder="t1", pusher=pusher)

    async def completed():
        await pushes.run_once()
        return (await api.get(f"/v1/runs/{run_id}", headers=s.world.auth)).json()["status"] == "completed"

    await wait_for(completed)
    await pusher.stop(deadline=5)
    first, second = agent_server.of("a")
    assert second.headers["webhook-id"] == retried.json()["task_id"] != first.headers["webhook-id"]
    assert second.body["run_id"] == first.body["run_id"] == str(run_id)
    run = (await api.get(f"/v1/runs/{run_id}", headers=s.world.auth)).json()
    assert run["chain"]["task"]["id"] == retried.json()["task_id"] and run["chain"]["task"]["status"] == "succeeded"
    assert run["finished_at"] is not None and run["reason_code"] is None


_ = AgentServer  # the fixture's type, for readers
