"""Runner liveness: a dead runner's executions are retried within seconds, a live runner's never taken."""

import asyncio
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from hookgate import database
from hookgate.errors import LeaseLost
from hookgate.migrations import MIGRATION_LOCK_KEY
from scheduler.execution import succeed_in
from scheduler.liveness import LOCK_SPACE
from scheduler.manager import Scheduler, SchedulerConfig
from scheduler.spec import Every, JobRun, JobSpec
from tests.processes import free_port
from tests.scheduler.conftest import utc

T0 = utc(2027, 1, 4, 9, 0, 1)
PLAN = utc(2027, 1, 4)
SEC = timedelta(seconds=1)

HOLDER = """SELECT pid FROM pg_locks
            WHERE locktype = 'advisory' AND granted AND objsubid = 2
              AND classid = $1::integer::oid AND objid = $2::integer::oid
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"""


class Gate:
    """A handler that records its runs; attempt 1 waits until released (a runner busy or frozen mid-run)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.calls: list[JobRun] = []
        self.release = asyncio.Event()

    async def __call__(self, batch):
        for run in batch.runs:
            self.calls.append(run)
            if run.attempt == 1:
                await self.release.wait()
                run.result = {"attempt": 1}
            else:  # what the retry sees of the failed attempt, while it runs
                previous = await self.ctx.pool.fetchval("SELECT error_code FROM sys_cron_executions WHERE id = $1",
                                                        run.id)
                run.result = {"attempt": run.attempt, "previous_error": previous}

    async def started(self, count=1):
        while len(self.calls) < count:
            await asyncio.sleep(0.01)


def job(handler, **kw):
    return JobSpec(**({"name": "liveness", "handler": handler, "cadence": Every(timedelta(days=1))} | kw))


async def rows(ctx):
    return await ctx.pool.fetch("SELECT * FROM sys_cron_executions WHERE job_name = 'liveness' ORDER BY plan_time")


async def holder(ctx, key):
    """The backend pid holding liveness key ``key`` in the test database, or None."""
    return await ctx.pool.fetchval(HOLDER, LOCK_SPACE, key)


async def end_session(ctx, key):
    """End the session holding liveness key ``key`` (as PostgreSQL does when its process dies)."""
    pid = await holder(ctx, key)
    assert pid is not None
    assert await ctx.pool.fetchval("SELECT pg_terminate_backend($1)", pid)
    while await holder(ctx, key) is not None:
        await asyncio.sleep(0.01)


async def busy_runner(ctx, runner_id, **job_kw):
    """Handler, job, runner and ``run_once`` task of a runner (with a liveness session) busy with PLAN's attempt 1."""
    handler = Gate(ctx)
    spec = job(handler, **job_kw)
    runner = Scheduler(ctx.pool, [spec], SchedulerConfig(dsn=ctx.dsn, runner_id=runner_id))
    running = asyncio.create_task(runner.run_once(T0))
    await handler.started()
    return handler, spec, runner, running


async def insert_running(ctx, runner_lock):
    """A RUNNING execution of PLAN far from stale, held by a runner with liveness key ``runner_lock``."""
    await ctx.pool.execute("""
        INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status, attempt,
                                         max_attempts, runner_id, lease_token, heartbeat_at, stale_after,
                                         started_at, runner_lock)
        VALUES ('liveness', 'global', '-', $1, 'RUNNING', 1, 3, 'old-host:1', gen_random_uuid(), $2,
                $2::timestamptz + interval '5 minutes', $2, $3)""", PLAN, T0, runner_lock)


async def test_a_runner_whose_session_ended_has_its_execution_failed_runner_gone_and_retried_at_once(ctx):
    handler, spec, dead, frozen = await busy_runner(ctx, "dead")
    (row,) = await rows(ctx)
    assert (row["runner_id"], row["runner_lock"]) == ("dead", dead.liveness.key)
    await end_session(ctx, dead.liveness.key)
    # Ten seconds later, long before stale_after (five minutes), another runner's tick retries it.
    report = await Scheduler(ctx.pool, [spec], SchedulerConfig(runner_id="alive")).run_once(T0 + 10 * SEC)
    assert (report.gone, report.swept, report.claimed) == (1, 0, {"liveness": 1})
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"], row["plan_time"], row["runner_id"]) == ("SUCCESS", 2, PLAN, "alive")
    assert row["result"] == {"attempt": 2, "previous_error": "runner_gone"}
    assert [(r.attempt, r.plan_time) for r in handler.calls] == [(1, PLAN), (2, PLAN)]
    handler.release.set()
    await asyncio.wait_for(frozen, 10)


async def test_a_live_runners_execution_is_never_swept_by_another_runners_tick(ctx):
    handler, spec, _busy, running = await busy_runner(ctx, "busy")
    other = Scheduler(ctx.pool, [spec], SchedulerConfig(runner_id="other"))
    for later in (SEC, 10 * SEC, timedelta(minutes=4, seconds=59)):  # up to stale_after, not past it
        report = await other.run_once(T0 + later)
        assert (report.gone, report.swept, report.claimed) == (0, 0, {"liveness": 0})
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"], row["runner_id"]) == ("RUNNING", 1, "busy")
    handler.release.set()
    await asyncio.wait_for(running, 10)
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"], row["result"]) == ("SUCCESS", 1, {"attempt": 1})


async def test_a_runner_wrongly_presumed_dead_is_refused_its_late_writes_after_the_takeover(ctx):
    handler, spec, cut, frozen = await busy_runner(ctx, "cut", heartbeat=timedelta(seconds=0.05))
    await end_session(ctx, cut.liveness.key)  # its liveness session is cut, its pool still works
    await Scheduler(ctx.pool, [spec], SchedulerConfig(runner_id="new")).run_once(T0 + 10 * SEC)
    first = handler.calls[0]
    await asyncio.wait_for(first.lease_lost.wait(), 10)  # told by its next heartbeat
    handler.release.set()
    await asyncio.wait_for(frozen, 10)
    assert not first.finished
    async with ctx.pool.acquire() as conn:
        with pytest.raises(LeaseLost):
            await succeed_in(conn, [first], T0 + 11 * SEC)
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"], row["runner_id"]) == ("SUCCESS", 2, "new")
    assert row["result"] == {"attempt": 2, "previous_error": "runner_gone"}


async def test_a_runner_takes_its_lock_again_before_it_claims_after_its_session_ended(ctx):
    handler = Gate(ctx)
    handler.release.set()
    scheduler = Scheduler(ctx.pool, [job(handler)], SchedulerConfig(dsn=ctx.dsn))
    assert await scheduler.liveness.ensure()  # held across run_once() calls, as in run()
    await scheduler.run_once(T0)
    key, first_pid = scheduler.liveness.key, await holder(ctx, scheduler.liveness.key)
    await end_session(ctx, key)
    report = await scheduler.tick(T0 + timedelta(days=1))  # tick(), unlike run_once(), keeps the lock after
    while scheduler.executor.inflight:
        await asyncio.sleep(0.01)
    assert report.live and report.claimed == {"liveness": 1}
    assert scheduler.liveness.key == key
    assert await holder(ctx, key) not in (None, first_pid)
    await scheduler.stop(deadline=5)
    assert await holder(ctx, key) is None
    assert [(r["status"], r["runner_lock"]) for r in await rows(ctx)] == [("SUCCESS", key)] * 2


async def test_a_runner_that_cannot_hold_its_lock_claims_nothing(ctx):
    parts = urlsplit(ctx.dsn)
    unreachable = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{free_port()}"))
    handler = Gate(ctx)
    report = await Scheduler(ctx.pool, [job(handler)], SchedulerConfig(dsn=unreachable)).run_once(T0)
    assert (report.live, report.claimed) == (False, {})
    assert handler.calls == [] and await rows(ctx) == []


async def test_rows_claimed_before_liveness_locks_existed_count_as_a_dead_runners(ctx):
    await insert_running(ctx, None)
    handler = Gate(ctx)
    report = await Scheduler(ctx.pool, [job(handler)]).run_once(T0 + SEC)
    assert (report.gone, report.claimed) == (1, {"liveness": 1})
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"], row["result"]["previous_error"]) == ("SUCCESS", 2, "runner_gone")


async def test_only_this_databases_liveness_locks_keep_a_runner_alive(ctx, server_url):
    # The migration lock is a one-bigint advisory lock: its low half equal to a runner's key proves
    # nothing, and neither does the same liveness key locked in another database of the server.
    key = MIGRATION_LOCK_KEY & 0x7FFFFFFF
    await insert_running(ctx, key)
    migrator = await database.connect(ctx.dsn)
    elsewhere = await asyncpg.connect(server_url)
    try:
        await migrator.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
        assert await elsewhere.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_SPACE, key)
        report = await Scheduler(ctx.pool, [job(Gate(ctx))]).run_once(T0 + SEC)
    finally:
        await migrator.close()
        await elsewhere.close()
    assert report.gone == 1
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"]) == ("SUCCESS", 2)


async def test_stop_keeps_the_liveness_lock_until_running_handlers_are_done(ctx):
    handler = Gate(ctx)
    spec = job(handler)
    scheduler = Scheduler(ctx.pool, [spec], SchedulerConfig(dsn=ctx.dsn, max_tick=0.2))
    service = asyncio.create_task(scheduler.run())
    await asyncio.wait_for(handler.started(), 10)
    stopping = asyncio.create_task(scheduler.stop(deadline=10))
    await asyncio.sleep(0.3)
    assert not stopping.done() and await holder(ctx, scheduler.liveness.key) is not None
    report = await Scheduler(ctx.pool, [spec]).run_once()
    assert report.gone == 0
    handler.release.set()
    await asyncio.wait_for(stopping, 10)
    await asyncio.wait_for(service, 10)
    assert await holder(ctx, scheduler.liveness.key) is None
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"]) == ("SUCCESS", 1)


async def test_a_scheduler_looks_again_within_the_liveness_poll_while_another_runner_holds_executions(ctx):
    handler = Gate(ctx)
    spec = job(handler)
    busy = asyncio.create_task(Scheduler(ctx.pool, [spec]).run_once(T0))
    await handler.started()
    watcher = Scheduler(ctx.pool, [spec], SchedulerConfig(max_tick=120, liveness_poll=2))
    assert await watcher._sleep_for(T0 + SEC) == pytest.approx(2)
    handler.release.set()
    await asyncio.wait_for(busy, 10)
    assert await watcher._sleep_for(T0 + SEC) == 120
