"""The runtime claim long-poll over real HTTP.

Woken by NOTIFY, found by the poll fallback, a bounded and fair herd, hang-ups and shutdown.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx

from autopilot import admission, dispatch, tasks
from gateway.claim_wait import ClaimWaits
from gateway.server import HttpServer
from hookgate.context import Context, open_context
from scheduler.maintenance import leases
from tests import factories
from tests.conftest import make_settings, serving

HEARTBEAT_S = 120.0


class Served:
    """A gateway on a loopback socket over its own context, with a pull agent and an autopilot."""

    def __init__(self, ctx: Context, server: HttpServer, url: str) -> None:
        self.ctx, self.server, self.url = ctx, server, url
        self.agent: Any = None
        self.autopilot: Any = None

    @property
    def waits(self) -> ClaimWaits:
        """The gateway's claim waits."""
        waits: ClaimWaits = self.server.app.state.claim_waits  # type: ignore[attr-defined]
        return waits

    def auth(self) -> dict[str, str]:
        """The agent's runtime bearer."""
        return {"Authorization": f"Bearer {self.agent.runtime_token}"}

    async def make_task(self) -> Any:
        """Admit and dispatch one run (which NOTIFYs hookgate_tasks); returns the task id."""
        async with self.ctx.pool.acquire() as conn:
            adm = await admission.admit(conn, autopilot_id=self.autopilot["id"], source="api", payload={},
                                        heartbeat_timeout_s=HEARTBEAT_S)
            done = await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=HEARTBEAT_S))
        return done.task_id

    async def task(self, task_id: Any) -> Any:
        """The task row."""
        return await self.ctx.pool.fetchrow("SELECT * FROM agent_task WHERE id = $1", task_id)

    async def until_waiting(self, n: int) -> None:
        """Until ``n`` claims wait and the listener is connected (so a NOTIFY cannot fall before LISTEN)."""
        await until(lambda: self.waits.waiting == n and self.waits.wake.connected)


async def until(check: Any, timeout: float = 5.0) -> None:
    """Poll a condition every 10 ms (a test helper: the code under test never sleeps to wait)."""
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "condition not reached in time"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def served(db_url: str, max_concurrency: int = 4, **overrides: Any) -> AsyncIterator[Served]:
    """Open a context with ``overrides``, serve it over HTTP, make a pull agent; stop it all afterwards."""
    async with open_context(make_settings(db_url, **overrides), migrate=False) as ctx, serving(ctx) as server:
        s = Served(ctx, server, f"http://127.0.0.1:{server.port}")
        w = await factories.world(ctx)
        s.agent = await factories.pull_agent(w, max_concurrency=max_concurrency)
        s.autopilot = await factories.autopilot(w, s.agent.row["id"], mode="create_issue")
        yield s


async def claim(http: httpx.AsyncClient, s: Served, wait_s: float, instance: str = "default") -> httpx.Response:
    """One claim request."""
    return await http.post(f"{s.url}/v1/runtime/claim", json={"wait_s": wait_s, "instance": instance},
                           headers=s.auth(), timeout=30)


async def test_a_waiting_claim_gets_a_new_task_on_notify_well_before_the_poll_interval(db_url):
    async with served(db_url, runtime_claim_poll_s=5.0) as s, httpx.AsyncClient() as http:
        waiting = asyncio.create_task(claim(http, s, wait_s=10))
        await s.until_waiting(1)
        queued_at = time.monotonic()
        task_id = await s.make_task()
        answer = await waiting
        elapsed = time.monotonic() - queued_at
    assert answer.status_code == 200 and answer.json()["task"]["id"] == str(task_id)
    assert elapsed < 1.0, f"the claim took {elapsed:.3f} s after the task was queued (poll fallback is 5 s)"


async def test_the_fallback_poll_finds_a_retry_that_came_due_by_time(db_url):
    async with (served(db_url, runtime_claim_poll_s=0.3, push_retry_schedule="0.8,0.8,0.8,0.8") as s,
                httpx.AsyncClient() as http):
        task_id = await s.make_task()
        first = (await claim(http, s, wait_s=0)).json()
        retry = {"lease_token": first["lease_token"], "status": "failed", "retry_class": "transient"}
        reported = await http.post(f"{s.url}/v1/runtime/tasks/{task_id}/report", json=retry, headers=s.auth())
        assert reported.status_code == 200 and reported.json()["status"] == "queued"
        # The retry comes due 0.72-0.88 s from now (0.8 s ±10 %) and nobody announces that moment: only the
        # poll finds it.
        started = time.monotonic()
        again = await claim(http, s, wait_s=5)
        elapsed = time.monotonic() - started
    assert again.status_code == 200 and again.json()["task"]["id"] == str(task_id)
    assert again.json()["task"]["attempt"] == 2
    assert elapsed < 0.88 + 0.3 + 0.5


async def test_a_herd_of_waiters_of_one_agent_gets_one_task_once_oldest_first_with_few_claims(db_url, monkeypatch):
    calls = 0
    real_claim = tasks.claim

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await real_claim(*args, **kwargs)

    monkeypatch.setattr(tasks, "claim", counting)
    async with served(db_url, runtime_claim_poll_s=30.0) as s, httpx.AsyncClient() as http:
        herd = []
        for i in range(8):  # one at a time, so the arrival order is known
            herd.append(asyncio.create_task(claim(http, s, wait_s=2.0, instance=f"w{i}")))
            await s.until_waiting(i + 1)
        before = calls
        started = time.monotonic()
        task_id = await s.make_task()
        answers = await asyncio.gather(*herd)
        elapsed = time.monotonic() - started
        row = await s.task(task_id)
    won = [(i, a) for i, a in enumerate(answers) if a.status_code == 200]
    assert len(won) == 1 and [a.status_code for a in answers].count(204) == 7
    assert won[0][0] == 0 and row["holder_instance"] == "w0", "the runtime that waited longest is served first"
    assert calls - before <= 3, f"{calls - before} claim statements for one notification and 8 waiters"
    assert elapsed >= 1.0, "the others kept waiting until their deadline"


async def test_a_claim_that_hangs_up_mid_wait_stops_waiting_and_claims_nothing(db_url):
    async with served(db_url, runtime_claim_poll_s=30.0) as s:
        async with httpx.AsyncClient() as http:
            waiting = asyncio.create_task(claim(http, s, wait_s=20))
            await s.until_waiting(1)
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
        await until(lambda: s.waits.waiting == 0, timeout=2.0)
        task_id = await s.make_task()
        await asyncio.sleep(0.2)
        row = await s.task(task_id)
    assert row["status"] == "queued" and row["attempt"] == 0


async def test_a_task_won_for_a_runtime_that_hung_up_during_the_claim_goes_back_uncounted(db_url, monkeypatch):
    real_claim = tasks.claim
    gate = asyncio.Event()
    in_claim = asyncio.Event()
    hold = False

    async def slow(*args: Any, **kwargs: Any) -> Any:
        if hold:
            in_claim.set()
            await gate.wait()
        return await real_claim(*args, **kwargs)

    monkeypatch.setattr(tasks, "claim", slow)
    async with served(db_url, runtime_claim_poll_s=30.0) as s:
        async with httpx.AsyncClient() as http:
            waiting = asyncio.create_task(claim(http, s, wait_s=20))
            await s.until_waiting(1)
            hold = True
            task_id = await s.make_task()
            await asyncio.wait_for(in_claim.wait(), 2)
            waiting.cancel()  # the client hangs up while its claim is in the database
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
        await asyncio.sleep(0.2)  # the server sees the hang-up
        gate.set()
        await until(lambda: s.waits.waiting == 0, timeout=2.0)
        row = await s.task(task_id)
        reason = await s.ctx.pool.fetchval("SELECT detail->>'reason' FROM audit_log WHERE action = 'RELEASE' "
                                           "AND subject_id = $1", str(task_id))
        hold = False
        async with httpx.AsyncClient() as http:
            next_claim = await claim(http, s, wait_s=0)
    assert row["status"] == "queued" and row["attempt"] == 0 and row["lease_token"] is None
    assert reason == "client_gone"
    assert next_claim.status_code == 200 and next_claim.json()["task"]["attempt"] == 1


async def test_shutdown_ends_waiting_claims_at_once(db_url):
    async with served(db_url, runtime_claim_poll_s=30.0) as s, httpx.AsyncClient() as http:
        herd = [asyncio.create_task(claim(http, s, wait_s=25, instance=f"w{i}")) for i in range(3)]
        await s.until_waiting(3)
        started = time.monotonic()
        await s.server.stop()
        answers = await asyncio.gather(*herd)
        elapsed = time.monotonic() - started
        assert s.waits.wake.connected is False
    assert [a.status_code for a in answers] == [204, 204, 204]
    assert elapsed < 2.0


async def test_a_watchdog_expiry_wakes_a_waiting_runtime(db_url):
    async with served(db_url, runtime_claim_poll_s=5.0) as s, httpx.AsyncClient() as http:
        task_id = await s.make_task()
        assert (await claim(http, s, wait_s=0, instance="crashed")).status_code == 200
        waiting = asyncio.create_task(claim(http, s, wait_s=10, instance="spare"))
        await s.until_waiting(1)
        started = time.monotonic()
        async with s.ctx.pool.acquire() as conn:
            now = await conn.fetchval("SELECT now()")
            swept = await leases.sweep(conn, heartbeat_timeout_s=HEARTBEAT_S, now=now + timedelta(hours=3))
        answer = await waiting
        elapsed = time.monotonic() - started
    assert swept.requeued == 1
    assert answer.status_code == 200 and answer.json()["task"]["id"] == str(task_id) and elapsed < 1.0


async def test_a_report_that_frees_the_agents_slot_wakes_a_waiting_runtime(db_url):
    async with served(db_url, max_concurrency=1, runtime_claim_poll_s=5.0) as s, httpx.AsyncClient() as http:
        first_id = await s.make_task()
        second_id = await s.make_task()
        held = (await claim(http, s, wait_s=0, instance="a")).json()
        assert held["task"]["id"] == str(first_id)
        waiting = asyncio.create_task(claim(http, s, wait_s=10, instance="b"))
        await s.until_waiting(1)
        started = time.monotonic()
        done = {"lease_token": held["lease_token"], "status": "succeeded"}
        assert (await http.post(f"{s.url}/v1/runtime/tasks/{first_id}/report", json=done,
                                headers=s.auth())).status_code == 200
        answer = await waiting
        elapsed = time.monotonic() - started
    assert answer.status_code == 200 and answer.json()["task"]["id"] == str(second_id) and elapsed < 1.0


async def test_a_dropped_listener_costs_only_the_poll_interval_and_is_reopened(db_url):
    async with served(db_url, runtime_claim_poll_s=0.3) as s, httpx.AsyncClient() as http:
        first = asyncio.create_task(claim(http, s, wait_s=10, instance="w0"))
        await s.until_waiting(1)
        second = asyncio.create_task(claim(http, s, wait_s=10, instance="w1"))
        await s.until_waiting(2)
        async with s.ctx.pool.acquire() as conn:
            pid = s.waits.wake._conn.get_server_pid()  # type: ignore[union-attr]
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
        await until(lambda: not s.waits.wake.connected, timeout=2.0)
        task_id = await s.make_task()  # its NOTIFY most likely reaches nobody in this process
        started = time.monotonic()
        answer = await first
        elapsed = time.monotonic() - started
        await until(lambda: s.waits.wake.connected, timeout=2.0)  # the poll tick reopened it
        await s.server.stop()
        assert (await second).status_code == 204
    assert answer.status_code == 200 and answer.json()["task"]["id"] == str(task_id) and elapsed < 1.0
