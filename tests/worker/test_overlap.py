"""Overlap policy ``buffer_one`` end to end: real schedulers, real worker services, a real HTTP agent.

One run of the trigger is active, one waits (``pending``, ``reason_code = buffered``, not dispatched), a third
is skipped; when the active one ends the waiting one is dispatched at once (woken by NOTIFY, not a poll).
"""

import asyncio
import contextlib
from datetime import timedelta

from starlette.responses import JSONResponse

from hookgate.context import open_context
from scheduler.jobs import autopilot_schedule_job
from scheduler.manager import Scheduler, SchedulerConfig
from tests import factories
from tests.conftest import make_settings
from tests.scheduler.conftest import utc
from tests.worker.conftest import FAST, wait_for
from worker import role

MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
DAY0 = utc(2027, 2, 1, 9, 0)


async def _runs(conn, trigger_id):
    return await conn.fetch("SELECT * FROM autopilot_run WHERE trigger_id = $1 ORDER BY planned_at", trigger_id)


async def _true(value):
    return value


@contextlib.asynccontextmanager
async def _workers(ctx, count):
    """``count`` sets of the worker role's services (as ``hookgate worker`` runs them), running."""
    sets = [role.services(ctx) for _ in range(count)]
    tasks = [asyncio.create_task(s.run()) for services in sets for s in services]
    try:
        yield
    finally:
        for services in sets:
            for s in reversed(services):
                await s.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)


@contextlib.asynccontextmanager
async def _released(events):
    """Let every held answer go on the way out, so the workers stop without cancelling a push."""
    try:
        yield
    finally:
        for event in events:
            event.set()


async def test_buffer_one_keeps_one_waiting_skips_a_third_and_starts_the_waiting_one_when_the_first_ends(
        db_url, agent_server):
    # A poll far longer than the test: only a wake-up can start the waiting run in time.
    async with open_context(make_settings(db_url, **(FAST | {"worker_poll_s": 30.0})), migrate=False) as ctx:
        release = [asyncio.Event(), asyncio.Event()]

        async def held(n, _hit):
            if n < 2:
                await release[n].wait()
            return JSONResponse({"ok": True})

        agent_server.behaviours["a"] = held
        w = await factories.world(ctx)
        agent = await factories.http_agent(w, url=agent_server.url("a"), name="a", timeout_s=30)
        ap = await factories.autopilot(w, agent.row["id"])
        trigger = await factories.schedule_trigger(w, ap, "* * * * *", DAY0, "UTC", overlap_policy="buffer_one")
        job = autopilot_schedule_job(heartbeat_timeout_s=120.0)
        schedulers = [Scheduler(ctx.pool, [job], SchedulerConfig()) for _ in range(2)]
        async with _workers(ctx, 2), _released(release), ctx.pool.acquire() as conn:
            await schedulers[0].run_once(DAY0 + SEC)
            await wait_for(lambda: _true(len(agent_server.of("a")) == 1), timeout=10)

            await schedulers[1].run_once(DAY0 + MIN + SEC)
            await asyncio.sleep(1.0)  # both workers were woken: neither may start it
            first, second = await _runs(conn, trigger["id"])
            assert first["status"] == "running"
            assert (second["status"], second["reason_code"], second["task_id"]) == ("pending", "buffered", None)
            assert len(agent_server.of("a")) == 1

            await schedulers[0].run_once(DAY0 + 2 * MIN + SEC)
            third = (await _runs(conn, trigger["id"]))[2]
            assert (third["status"], third["reason_code"]) == ("skipped", "previous_run_active")

            release[0].set()  # the first ends: the waiting one starts at once, not at the next poll
            await wait_for(lambda: _true(len(agent_server.of("a")) == 2), timeout=5)
            first, second, _ = await _runs(conn, trigger["id"])
            assert first["status"] == "completed"
            assert (second["status"], second["reason_code"]) == ("running", None)
            assert agent_server.peak["a"] == 1  # never two active

            await schedulers[1].run_once(DAY0 + 3 * MIN + SEC)  # behind the second: waits in turn
            fourth = (await _runs(conn, trigger["id"]))[3]
            assert (fourth["status"], fourth["reason_code"]) == ("pending", "buffered")
            release[1].set()
            await wait_for(lambda: _true(len(agent_server.of("a")) == 3), timeout=5)
            assert agent_server.peak["a"] == 1
