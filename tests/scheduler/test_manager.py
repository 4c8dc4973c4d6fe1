"""The generic scheduler: claims, takeover, leases, retries, catch-up, stop — with injected time."""

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from hookgate import database
from hookgate.errors import LeaseLost
from scheduler.execution import succeed_in
from scheduler.manager import Scheduler, SchedulerConfig
from scheduler.spec import Every, EveryPlan, JobRun, JobSpec, LatestOnly
from tests.scheduler.conftest import utc

MIN = timedelta(minutes=1)
T0 = utc(2027, 1, 4, 9, 0, 1)
DAILY = Every(timedelta(days=1))


class Recorder:
    """A handler that records every run it was given and does what the test asks."""

    def __init__(self, behave=None):
        self.calls: list[JobRun] = []
        self.behave = behave

    async def __call__(self, batch):
        for run in batch.runs:
            self.calls.append(run)
            if self.behave is not None:
                await self.behave(run)
            else:
                run.result = {"scope": run.scope_id, "attempt": run.attempt}


def job(handler, **kw):
    values = {"name": "sweeper", "handler": handler, "cadence": Every(MIN)}
    return JobSpec(**(values | kw))


def scopes(*names):
    async def provide(conn, now):
        return list(names)
    return provide


async def rows(ctx, name="sweeper"):
    return await ctx.pool.fetch("SELECT * FROM sys_cron_executions WHERE job_name = $1 ORDER BY scope_id, plan_time",
                                name)


async def test_two_schedulers_racing_claim_each_plan_exactly_once(ctx):
    handler = Recorder()
    spec = job(handler, scopes=scopes("a", "b", "c"))
    first, second = Scheduler(ctx.pool, [spec]), Scheduler(ctx.pool, [spec])
    reports = await asyncio.gather(first.run_once(T0), second.run_once(T0))
    assert sorted(r.scope_id for r in handler.calls) == ["a", "b", "c"]
    assert sum(r.claimed["sweeper"] for r in reports) == 3
    found = await rows(ctx)
    assert [(r["scope_id"], r["plan_time"], r["status"]) for r in found] == [
        (s, utc(2027, 1, 4, 9, 0), "SUCCESS") for s in "abc"]
    assert found[0]["result"] == {"scope": "a", "attempt": 1}
    # The same plan is never claimed again.
    await first.run_once(T0 + timedelta(seconds=30))
    assert len(handler.calls) == 3


async def test_a_crashing_handler_is_failed_with_its_message_and_retried_as_the_same_plan_at_1_5_15_min(ctx):
    async def crash(run):
        raise RuntimeError("agent store down")

    spec = job(Recorder(crash), max_attempts=4, cadence=Every(timedelta(days=1)))
    scheduler = Scheduler(ctx.pool, [spec])
    now = utc(2027, 1, 4, 0, 0, 5)
    await scheduler.run_once(now)
    for attempt, base in ((1, 1), (2, 5), (3, 15)):
        (row,) = await rows(ctx)
        assert (row["status"], row["attempt"], row["error_code"]) == ("FAILED", attempt, "handler_error")
        assert row["error_message"] == "RuntimeError: agent store down"
        assert row["plan_time"] == utc(2027, 1, 4)
        delay = row["next_retry_at"] - row["finished_at"]
        assert timedelta(minutes=base) <= delay <= timedelta(minutes=base) * 1.1
        early = await scheduler.run_once(row["next_retry_at"] - timedelta(seconds=1))
        assert early.claimed["sweeper"] == 0
        now = row["next_retry_at"]
        assert (await scheduler.run_once(now)).claimed["sweeper"] == 1
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"], row["next_retry_at"]) == ("FAILED", 4, None)
    assert (await scheduler.run_once(now + timedelta(hours=1))).claimed["sweeper"] == 0


async def test_a_stale_runner_is_told_by_its_heartbeat_and_its_late_result_is_ignored_after_a_takeover(ctx):
    told = asyncio.Event()

    async def behave(run):
        if run.attempt == 1:
            await asyncio.wait_for(run.lease_lost.wait(), 10)
            told.set()
            run.result = {"by": "stale runner"}
        else:
            run.result = {"by": "new holder"}

    spec = job(Recorder(behave), heartbeat=timedelta(seconds=0.05), cadence=DAILY)
    slow = asyncio.create_task(Scheduler(ctx.pool, [spec], SchedulerConfig(runner_id="slow")).run_once(T0))
    while not await rows(ctx):
        await asyncio.sleep(0.01)
    # Six minutes later (stale after five), another scheduler sweeps the row and takes it over.
    report = await Scheduler(ctx.pool, [spec], SchedulerConfig(runner_id="new")).run_once(T0 + 6 * MIN)
    assert report.swept == 1 and report.claimed["sweeper"] == 1
    await asyncio.wait_for(slow, 10)
    assert told.is_set()
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"], row["runner_id"]) == ("SUCCESS", 2, "new")
    assert row["result"] == {"by": "new holder"}


async def test_a_late_terminal_write_with_an_old_token_changes_nothing(ctx):
    release = asyncio.Event()
    seen: list[JobRun] = []

    async def behave(run):
        seen.append(run)
        if run.attempt == 1:
            await release.wait()  # a stuck runner that never heartbeats (heartbeat far away)
        run.result = {"attempt": run.attempt}

    spec = job(Recorder(behave), heartbeat=timedelta(seconds=60), cadence=DAILY)
    slow = asyncio.create_task(Scheduler(ctx.pool, [spec], SchedulerConfig(runner_id="slow")).run_once(T0))
    while not seen:
        await asyncio.sleep(0.01)
    await Scheduler(ctx.pool, [spec], SchedulerConfig(runner_id="new")).run_once(T0 + 6 * MIN)
    release.set()
    await asyncio.wait_for(slow, 10)
    (row,) = await rows(ctx)
    assert (row["status"], row["attempt"], row["result"]) == ("SUCCESS", 2, {"attempt": 2})
    assert seen[0].lease_lost.is_set() and not seen[0].finished
    async with ctx.pool.acquire() as conn:
        with pytest.raises(LeaseLost):
            await succeed_in(conn, [seen[0]], T0 + 7 * MIN)
    assert (await rows(ctx))[0]["result"] == {"attempt": 2}


async def test_stale_rows_are_marked_failed_at_the_next_tick_and_without_reentry_not_retried(ctx):
    hang = asyncio.Event()

    async def behave(run):
        await hang.wait()

    spec = job(Recorder(behave), stale_reentry=False, cadence=DAILY)
    stuck = Scheduler(ctx.pool, [spec])
    await stuck.tick(T0)
    while not await rows(ctx):
        await asyncio.sleep(0.01)
    report = await Scheduler(ctx.pool, [spec]).run_once(T0 + 6 * MIN)
    assert report.swept == 1
    stale = await rows(ctx)
    assert report.claimed["sweeper"] == 0
    assert (stale[0]["status"], stale[0]["error_code"], stale[0]["next_retry_at"]) == ("FAILED", "stale_timeout", None)
    await stuck.stop(deadline=0.2)


async def test_a_handler_past_its_run_timeout_is_failed(ctx):
    async def behave(run):
        await asyncio.sleep(10)

    spec = job(Recorder(behave), run_timeout=timedelta(seconds=0.2))
    await Scheduler(ctx.pool, [spec]).run_once(T0)
    (row,) = await rows(ctx)
    assert (row["status"], row["error_code"]) == ("FAILED", "run_timeout")


async def test_every_plan_catches_up_oldest_first_within_its_window_and_per_tick_maximum(ctx):
    handler = Recorder()
    spec = job(handler, catch_up=EveryPlan(window=10 * MIN, max_per_tick=3))
    scheduler = Scheduler(ctx.pool, [spec])
    await scheduler.run_once(T0)
    await scheduler.run_once(T0)
    plans = [r.plan_time for r in handler.calls]
    assert plans == [utc(2027, 1, 4, 8, 51) + i * MIN for i in range(6)]


async def test_latest_only_fires_the_newest_plan_and_drops_it_when_too_late(ctx):
    handler = Recorder()
    spec = job(handler, cadence=Every(timedelta(hours=1)), catch_up=LatestOnly(late_after=5 * MIN))
    scheduler = Scheduler(ctx.pool, [spec])
    await scheduler.run_once(utc(2027, 1, 4, 9, 3))
    await scheduler.run_once(utc(2027, 1, 4, 15, 10))  # six hours later, 10 minutes after the hour
    await scheduler.run_once(utc(2027, 1, 4, 16, 4))
    assert [r.plan_time for r in handler.calls] == [utc(2027, 1, 4, 9), utc(2027, 1, 4, 16)]


async def _stopped_while_handling(ctx, handler_s, deadline, within):
    """The execution row of a running scheduler stopped (``deadline``; done ``within`` s) while its handler runs.

    The handler takes ``handler_s`` seconds, then records ``{"done": True}``.
    """
    started = asyncio.Event()

    async def behave(run):
        started.set()
        await asyncio.sleep(handler_s)
        run.result = {"done": True}

    scheduler = Scheduler(ctx.pool, [job(Recorder(behave))], SchedulerConfig(max_tick=0.2))
    task = asyncio.create_task(scheduler.run())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.wait_for(scheduler.stop(deadline=deadline), within)
    await asyncio.wait_for(task, 5)
    (row,) = await rows(ctx)
    return row


async def test_stop_lets_a_running_handler_finish_within_the_deadline(ctx):
    row = await _stopped_while_handling(ctx, handler_s=0.3, deadline=5, within=6)
    assert (row["status"], row["result"]) == ("SUCCESS", {"done": True})


async def test_stop_past_its_deadline_cancels_the_handler_and_records_the_shutdown(ctx):
    row = await _stopped_while_handling(ctx, handler_s=30, deadline=0.2, within=5)
    assert (row["status"], row["error_code"]) == ("FAILED", "shutdown")
    assert row["next_retry_at"] is not None


async def test_the_scheduler_sleeps_until_the_next_due_plan(ctx):
    scheduler = Scheduler(ctx.pool, [job(Recorder())], SchedulerConfig(max_tick=120))
    await scheduler.run_once(utc(2027, 1, 4, 9, 0, 10))
    assert await scheduler._sleep_for(utc(2027, 1, 4, 9, 0, 10)) == pytest.approx(50)
    assert await Scheduler(ctx.pool, [job(Recorder())], SchedulerConfig(max_tick=5))._sleep_for(T0) == 5


async def test_rows_of_jobs_this_scheduler_does_not_run_never_keep_it_awake(ctx):
    await ctx.pool.execute("""INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status,
                                                               lease_token, stale_after, next_retry_at)
                              VALUES ('retired_job', 'global', '-', $1, 'FAILED', gen_random_uuid(), $1, $1)""", T0)
    scheduler = Scheduler(ctx.pool, [job(Recorder(), cadence=DAILY)], SchedulerConfig(max_tick=30))
    await scheduler.run_once(T0 + MIN)
    assert await scheduler._sleep_for(T0 + MIN) == 30


async def test_a_frozen_holder_session_is_ended_so_its_row_locks_cannot_outlive_the_stale_timeout(ctx):
    from hookgate import database
    from scheduler.execution import hold

    conn = await database.connect(ctx.dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        assert await hold(conn, [], timedelta(milliseconds=200)) == []
        await asyncio.sleep(0.6)  # frozen, idle inside its transaction
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError)):
            await conn.fetchval("SELECT 1")
    finally:
        conn.terminate()


async def test_the_ticks_statements_read_executions_by_index_after_their_plans_were_made_on_small_tables(ctx):
    # A connection's prepared statements get a cached generic plan from their sixth call on, made from the
    # statistics of that moment. The tick's sweeps, takeovers and next-wake read must not keep scanning
    # sys_cron_executions whole once a herd has filled it (no ANALYZE in between: autovacuum off, or not yet).
    await ctx.pool.execute("ALTER TABLE sys_cron_executions SET (autovacuum_enabled = false)")
    await ctx.pool.execute("ANALYZE sys_cron_executions")  # empty
    pool = await database.create_pool(ctx.dsn, min_size=1, max_size=1)  # so its statements reach a sixth call
    try:
        scheduler = Scheduler(pool, [job(Recorder(), stale_reentry=True)], SchedulerConfig(dsn=ctx.dsn))
        for _ in range(8):
            await scheduler.run_once(T0)
            await scheduler._sleep_for(T0)
        await ctx.pool.execute(  # the history of a herd: 20,000 finished occurrences
            """INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status, attempt,
                                                max_attempts, runner_id, lease_token, heartbeat_at, stale_after,
                                                started_at, runner_lock, finished_at, duration_ms)
               SELECT 'sweeper', '-', gen_random_uuid()::text, $1, 'SUCCESS', 1, 3, 'old', gen_random_uuid(),
                      $1, $1, $1, 1, $1, 0
               FROM generate_series(1, 20000)""", T0 - MIN)
        before = await _scans(pool)
        report = await scheduler.run_once(T0)
        await scheduler._sleep_for(T0)
        after = await _scans(pool)
    finally:
        await pool.close()
    assert (report.swept, report.gone, report.claimed) == (0, 0, {"sweeper": 0})
    assert after["idx_scan"] > before["idx_scan"]  # the tick's statements read the table, by index
    assert after["seq_scan"] == before["seq_scan"]


async def _scans(pool):
    """sys_cron_executions' scan counters, with the pool connection's own counts flushed first."""
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_stat_force_next_flush()")  # flushed when the statement ends
        row = await conn.fetchrow("SELECT seq_scan, idx_scan FROM pg_stat_user_tables "
                                  "WHERE relname = 'sys_cron_executions'")
    return row


async def test_schedule_delay_holds_a_plan_back_until_it_has_settled(ctx):
    handler = Recorder()
    spec = job(handler, schedule_delay=timedelta(seconds=30), catch_up=LatestOnly(late_after=5 * MIN))
    scheduler = Scheduler(ctx.pool, [spec], SchedulerConfig(max_tick=120))
    await scheduler.run_once(utc(2027, 1, 4, 9, 0, 20))
    await scheduler.run_once(utc(2027, 1, 4, 9, 0, 31))
    assert [r.plan_time for r in handler.calls] == [utc(2027, 1, 4, 8, 59), utc(2027, 1, 4, 9, 0)]
    assert await scheduler._sleep_for(utc(2027, 1, 4, 9, 0, 31)) == pytest.approx(59)
