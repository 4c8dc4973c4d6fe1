"""Transactional jobs: fresh plans claimed, handled and recorded SUCCESS in one transaction, or not at all."""

import asyncio
from datetime import timedelta

import pytest

from scheduler.manager import Scheduler, SchedulerConfig
from scheduler.spec import Every, JobRun, JobSpec
from tests.scheduler.conftest import utc

MIN = timedelta(minutes=1)
T0 = utc(2027, 1, 4, 9, 0, 1)
PLAN = utc(2027, 1, 4)  # the daily plan T0 falls after


class Ordinary:
    """The job's ordinary handler: records the runs it was given; ``fail`` makes it raise."""

    def __init__(self, fail: bool = False):
        self.calls: list[JobRun] = []
        self.fail = fail

    async def __call__(self, batch):
        self.calls += batch.runs
        if self.fail:
            raise RuntimeError("ordinary handler down")
        for run in batch.runs:
            run.result = {"by": "ordinary", "attempt": run.attempt}


class InTransaction:
    """A transactional handler: one row in ``work`` per run, on the claiming transaction's connection."""

    def __init__(self, fail: bool = False, barrier: asyncio.Barrier | None = None):
        self.calls = 0
        self.fail, self.barrier = fail, barrier

    async def __call__(self, conn, batch):
        self.calls += 1
        if self.barrier is not None:  # both schedulers are inside their attempt before either writes
            await asyncio.wait_for(self.barrier.wait(), 5)
        for run in batch.runs:
            await conn.execute("INSERT INTO work (scope_id, plan_time) VALUES ($1, $2)", run.scope_id, run.plan_time)
            run.result = {"by": "transactional"}
        if self.fail:
            raise RuntimeError("transactional handler down")


def job(ordinary, fused, **kw):
    async def provide(conn, now):
        return ["a", "b", "c"]

    values = {"name": "fused", "handler": ordinary, "transactional": fused, "cadence": Every(timedelta(days=1)),
              "scopes": provide, "batch_size": 3}
    return JobSpec(**(values | kw))


@pytest.fixture
async def work(ctx):
    await ctx.pool.execute("CREATE TABLE work (scope_id text, plan_time timestamptz)")


async def executions(ctx):
    return await ctx.pool.fetch("SELECT *, xmin::text AS tx FROM sys_cron_executions WHERE job_name = 'fused' "
                                "ORDER BY scope_id")


async def written(ctx):
    return await ctx.pool.fetch("SELECT scope_id, plan_time, xmin::text AS tx FROM work ORDER BY scope_id")


async def test_a_transactional_job_commits_its_work_and_its_success_rows_in_one_transaction(ctx, work):
    ordinary, fused = Ordinary(), InTransaction()
    report = await Scheduler(ctx.pool, [job(ordinary, fused)]).run_once(T0)
    assert report.claimed["fused"] == 3 and fused.calls == 1 and ordinary.calls == []
    rows, done = await executions(ctx), await written(ctx)
    assert [(r["scope_id"], r["plan_time"], r["status"], r["attempt"]) for r in rows] == [
        (s, PLAN, "SUCCESS", 1) for s in "abc"]
    assert {r["result"]["by"] for r in rows} == {"transactional"}
    assert (rows[0]["started_at"], rows[0]["finished_at"]) == (T0, T0)
    # Written once, by the transaction that also made the handler's rows: never RUNNING, never updated.
    assert {r["tx"] for r in rows} == {d["tx"] for d in done} and len({r["tx"] for r in rows}) == 1
    # The plan is claimed for good: a later tick neither claims it again nor redoes its work.
    assert (await Scheduler(ctx.pool, [job(ordinary, fused)]).run_once(T0 + MIN)).claimed["fused"] == 0
    assert len(await written(ctx)) == 3


async def test_a_raising_transactional_handler_leaves_nothing_and_its_plans_are_claimed_the_ordinary_way(
    ctx, work
):
    ordinary, fused = Ordinary(fail=True), InTransaction(fail=True)
    scheduler = Scheduler(ctx.pool, [job(ordinary, fused)])
    assert (await scheduler.run_once(T0)).claimed["fused"] == 3
    assert await written(ctx) == []  # the attempt's writes were rolled back with it
    # The ordinary claim and handler, with the usual outcome: FAILED handler_error, retried as the same plan.
    rows = await executions(ctx)
    assert [(r["status"], r["attempt"], r["error_code"]) for r in rows] == [("FAILED", 1, "handler_error")] * 3
    assert {r["error_message"] for r in rows} == {"RuntimeError: ordinary handler down"}
    retry = rows[0]["next_retry_at"]
    assert MIN <= retry - rows[0]["finished_at"] <= 1.1 * MIN
    ordinary.fail = False
    await scheduler.run_once(max(r["next_retry_at"] for r in rows))
    rows = await executions(ctx)
    assert [(r["plan_time"], r["status"], r["attempt"]) for r in rows] == [(PLAN, "SUCCESS", 2)] * 3
    assert {r["result"]["by"] for r in rows} == {"ordinary"}
    assert fused.calls == 1  # retries are taken over by the ordinary handler, never fused


async def test_two_schedulers_racing_a_transactional_job_commit_each_plans_work_once(ctx, work):
    barrier = asyncio.Barrier(2)
    ordinary = Ordinary()
    fused = InTransaction(barrier=barrier)
    spec = job(ordinary, fused)
    reports = await asyncio.gather(Scheduler(ctx.pool, [spec]).run_once(T0), Scheduler(ctx.pool, [spec]).run_once(T0))
    assert fused.calls == 2  # both attempted; the unique key let one commit, the other rolled back
    assert sum(r.claimed["fused"] for r in reports) == 3
    assert [(d["scope_id"], d["plan_time"]) for d in await written(ctx)] == [(s, PLAN) for s in "abc"]
    rows = await executions(ctx)
    assert [(r["status"], r["attempt"]) for r in rows] == [("SUCCESS", 1)] * 3
    assert ordinary.calls == []


async def test_a_transactional_attempt_that_waits_on_a_lock_falls_back_to_a_durable_ordinary_claim(ctx, work):
    async def ordinary_writes(batch):
        async with batch.pool.acquire() as conn:
            for run in batch.runs:
                await conn.execute("INSERT INTO work (scope_id, plan_time) VALUES ($1, $2)", run.scope_id,
                                   run.plan_time)
                run.result = {"by": "ordinary"}

    fused = InTransaction()
    blocker = await ctx.pool.acquire()
    held = blocker.transaction()
    await held.start()
    await blocker.execute("LOCK TABLE work IN SHARE MODE")
    try:
        firing = asyncio.create_task(Scheduler(ctx.pool, [job(ordinary_writes, fused)]).run_once(T0))
        # After the attempt gave up (ATTEMPT_LOCK_TIMEOUT), the plans are claimed RUNNING and committed, so a
        # crash from now on is seen by liveness and retried, while the ordinary handler waits on the lock.
        for _ in range(200):
            rows = await executions(ctx)
            if rows:
                break
            await asyncio.sleep(0.025)
        assert [(r["status"], r["attempt"]) for r in rows] == [("RUNNING", 1)] * 3
    finally:
        await held.rollback()
        await ctx.pool.release(blocker)
    await asyncio.wait_for(firing, 10)
    rows = await executions(ctx)
    assert [(r["status"], r["attempt"], r["result"]) for r in rows] == [("SUCCESS", 1, {"by": "ordinary"})] * 3
    assert len(await written(ctx)) == 3 and fused.calls == 1


async def test_a_transactional_plan_is_refused_while_its_scope_has_an_occurrence_in_flight(ctx, work):
    from scheduler.spec import CustomPlans, Plan

    async def careless(conn, now, limit, scan):  # a planner that forgets single flight: the database must not
        return [Plan("a", PLAN + MIN)]

    async def never(conn, now):
        return None

    async with ctx.pool.acquire() as conn:  # an older occurrence failed and waits for its retry
        await conn.execute("""INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status,
                                  lease_token, stale_after, next_retry_at, single_flight)
                              VALUES ('fused', 'global', 'a', $1, 'FAILED', gen_random_uuid(), $1, $2, true)""",
                           PLAN, T0 + 10 * MIN)
    ordinary, fused = Ordinary(), InTransaction()
    spec = JobSpec(name="fused", handler=ordinary, transactional=fused, single_flight=True,
                   catch_up=CustomPlans(careless, never))
    assert (await Scheduler(ctx.pool, [spec], SchedulerConfig(concurrency=1)).run_once(T0)).claimed["fused"] == 0
    assert fused.calls == 1 and await written(ctx) == [] and ordinary.calls == []
    assert [(r["plan_time"], r["status"]) for r in await executions(ctx)] == [(PLAN, "FAILED")]
