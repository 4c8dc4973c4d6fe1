"""autopilot_schedule_dispatch end to end through the job, with injected database time."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import asyncpg

from autopilot import lifecycle
from scheduler.cron import Schedule
from scheduler.jobs import SCHEDULE_JOB, autopilot_schedule_job, newest_due
from scheduler.manager import BUSY_DUE_PAUSE_S, Scheduler, SchedulerConfig, TickReport
from sql import Q
from tests.scheduler.conftest import break_run_inserts, repair_run_inserts, run_inserts_held, utc, waiting_run_insert
from worker.runs import RunWorker

MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
DAY0 = utc(2027, 2, 1, 9, 0)  # a Monday, after every trigger's creation


@contextlib.asynccontextmanager
async def _woken(ctx) -> AsyncIterator[list[str]]:
    """The run ids announced to the workers during the block (at its end, waits up to 1 s for the first)."""
    woken: list[str] = []
    listener = await asyncpg.connect(ctx.dsn)
    await listener.add_listener("hookgate_runs", lambda *args: woken.append(args[3]))
    try:
        yield woken
        for _ in range(100):
            if woken:
                break
            await asyncio.sleep(0.01)
    finally:
        await listener.close()


async def test_an_occurrence_fires_one_pending_run_and_wakes_the_workers(setup, ctx):
    trigger = await setup.trigger("0 9 * * *", DAY0)
    async with _woken(ctx) as woken:
        report = await setup.scheduler().run_once(DAY0 + 2 * SEC)
        (run,) = await setup.runs(trigger["id"])
    assert report.claimed[SCHEDULE_JOB] == 1
    assert (run["status"], run["source"], run["planned_at"]) == ("pending", "schedule", DAY0)
    assert run["payload"]["event"] == "schedule.fired"
    assert run["payload"]["payload"]["planned_at"] == DAY0.isoformat()
    assert woken == [str(run["id"])]
    (execution,) = await setup.executions(trigger["id"])
    assert execution["status"] == "SUCCESS" and execution["result"]["run_id"] == str(run["id"])
    stored = await setup.trigger_row(trigger["id"])
    assert (stored["last_fired_at"], stored["next_fire_at"]) == (DAY0, DAY0 + timedelta(days=1))
    # Ticks before the next occurrence fire nothing.
    assert (await setup.scheduler().run_once(DAY0 + 3 * MIN)).claimed[SCHEDULE_JOB] == 0


async def test_after_six_hours_down_only_the_latest_occurrence_fires_and_only_if_at_most_5_minutes_late(setup):
    hourly = await setup.trigger("0 * * * *", DAY0)
    await setup.scheduler().run_once(DAY0 + SEC)
    # Down from 09:00:01 to 15:04:59: 10:00 … 15:00 were missed; only 15:00 (4m59s late) fires.
    await setup.scheduler().run_once(utc(2027, 2, 1, 15, 4, 59))
    assert [r["planned_at"] for r in await setup.runs(hourly["id"])] == [DAY0, utc(2027, 2, 1, 15)]
    # Down again until 21:05:01: 21:00 is more than 5 minutes late, nothing fires, no burst.
    late = await setup.scheduler().run_once(utc(2027, 2, 1, 21, 5, 1))
    assert late.claimed[SCHEDULE_JOB] == 0
    assert len(await setup.runs(hourly["id"])) == 2
    assert (await setup.trigger_row(hourly["id"]))["next_fire_at"] == utc(2027, 2, 1, 22)
    await setup.scheduler().run_once(utc(2027, 2, 1, 22, 0, 1))
    assert len(await setup.runs(hourly["id"])) == 3


async def test_cold_start_anchors_on_last_fired_at_and_a_new_trigger_never_fires_before_its_creation(setup, ctx):
    fresh = await setup.trigger("* * * * *", DAY0)
    async with ctx.pool.acquire() as conn:
        created = await conn.fetchval("SELECT created_at FROM autopilot_trigger WHERE id = $1", fresh["id"])
        await conn.execute("UPDATE autopilot_trigger SET next_fire_at = $2 WHERE id = $1",
                           fresh["id"], created.replace(second=0, microsecond=0))
    # The last instant of the creation's minute: created + 1 s could reach the next minute, which is due.
    await setup.scheduler().run_once(created.replace(second=59, microsecond=999999))
    assert await setup.runs(fresh["id"]) == []  # the occurrence before its creation is not fired
    old = await setup.trigger("0 9 * * *", DAY0)
    await ctx.pool.execute("UPDATE autopilot_trigger SET last_fired_at = $2 WHERE id = $1", old["id"], DAY0)
    await setup.scheduler().run_once(DAY0 + 2 * MIN)
    assert await setup.runs(old["id"]) == []  # already fired before a (simulated) restart


async def _retry_tick(ctx, scheduler: Scheduler, at: datetime) -> TickReport:
    """``run_once(at)`` whose handlers end only after the tick's own claims.

    A tick starts the retry it takes over, then claims fresh occurrences; a handler that ended in between (its
    last attempt failed, or it succeeded) would free the trigger for the newest occurrence in that same tick.
    Either order is right, but a test counting executions must know which: run inserts wait for a lock until
    the tick has claimed, so the retry is still in flight when the fresh occurrences are planned.
    """
    async with run_inserts_held(ctx):
        report = await scheduler.tick(at)
    await scheduler.executor.drain()
    await scheduler.liveness.close()
    return report


async def test_a_failed_occurrence_is_retried_as_the_same_plan_and_never_overlaps_the_next(setup, ctx):
    trigger = await setup.trigger("* * * * *", DAY0)
    await break_run_inserts(ctx)
    scheduler = setup.scheduler()
    await scheduler.run_once(DAY0 + SEC)
    retries = []
    for attempt in (1, 2):
        (row,) = await setup.executions(trigger["id"])
        assert (row["status"], row["attempt"], row["plan_time"]) == ("FAILED", attempt, DAY0)
        assert "run store unavailable" in row["error_message"] and row["error_code"] == "handler_error"
        retries.append(row["next_retry_at"] - row["finished_at"])
        # Newer occurrences are due meanwhile, but the trigger waits for its retry: single flight.
        waiting = await scheduler.run_once(row["next_retry_at"] - SEC)
        assert waiting.claimed[SCHEDULE_JOB] == 0
        assert len(await setup.executions(trigger["id"])) == 1
        if attempt == 2:
            await repair_run_inserts(ctx)
        await _retry_tick(ctx, scheduler, row["next_retry_at"])
    assert MIN <= retries[0] <= 1.1 * MIN and 5 * MIN <= retries[1] <= 5.5 * MIN
    (row,) = await setup.executions(trigger["id"])
    assert (row["status"], row["attempt"], row["plan_time"]) == ("SUCCESS", 3, DAY0)
    runs = await setup.runs(trigger["id"])
    assert [r["planned_at"] for r in runs] == [DAY0]
    # The retry is done: the next tick fires the newest occurrence (latest-only), not the missed ones.
    retried_at = row["finished_at"]
    await scheduler.run_once(retried_at + SEC)
    planned = [r["planned_at"] for r in await setup.runs(trigger["id"])]
    assert planned == [DAY0, retried_at.replace(second=0, microsecond=0)]


async def test_exhausted_attempts_release_the_trigger_to_its_next_occurrence(setup, ctx):
    trigger = await setup.trigger("* * * * *", DAY0)
    await break_run_inserts(ctx)
    scheduler = setup.scheduler()
    await scheduler.run_once(DAY0 + SEC)
    for _ in range(2):
        (row,) = await setup.executions(trigger["id"])
        await _retry_tick(ctx, scheduler, row["next_retry_at"])
    (row,) = await setup.executions(trigger["id"])
    assert (row["status"], row["attempt"], row["next_retry_at"]) == ("FAILED", 3, None)
    await repair_run_inserts(ctx)
    await scheduler.run_once(row["finished_at"] + 2 * SEC)
    assert len(await setup.runs(trigger["id"])) == 1


async def test_a_crash_after_the_run_was_admitted_is_repaired_by_reusing_that_run(setup, ctx):
    trigger = await setup.trigger("0 9 * * *", DAY0)
    scheduler = setup.scheduler()
    await scheduler.run_once(DAY0 + SEC)
    (first,) = await setup.runs(trigger["id"])
    # Simulate the crash window: the run is committed, but the execution never reached SUCCESS (its
    # holder died). The sweep marks it stale and the retry must find the run, not make a second one.
    await ctx.pool.execute("""UPDATE sys_cron_executions SET status = 'RUNNING', stale_after = $2, result = NULL
                              WHERE job_name = $1""", SCHEDULE_JOB, DAY0 + 5 * MIN)
    async with _woken(ctx) as woken:
        report = await scheduler.run_once(DAY0 + 5 * MIN + SEC)
    assert report.swept == 1 and report.claimed[SCHEDULE_JOB] == 1
    (execution,) = await setup.executions(trigger["id"])
    assert (execution["status"], execution["attempt"]) == ("SUCCESS", 2)
    assert execution["result"] == {"run_id": str(first["id"]), "status": "pending", "reason_code": None,
                                   "reused": True}
    assert [r["id"] for r in await setup.runs(trigger["id"])] == [first["id"]]
    assert woken == [str(first["id"])]  # still pending: the worker is woken again to dispatch it


async def test_overlap_skip_records_a_skipped_run_while_the_previous_one_is_active(setup):
    trigger = await setup.trigger("* * * * *", DAY0)
    scheduler = setup.scheduler()
    await scheduler.run_once(DAY0 + SEC)
    await scheduler.run_once(DAY0 + MIN + SEC)
    first, second = await setup.runs(trigger["id"])
    assert first["status"] == "pending"
    assert (second["status"], second["reason_code"]) == ("skipped", "previous_run_active")


async def test_overlap_buffer_one_keeps_one_waiting_and_allow_never_skips(setup):
    buffered = await setup.trigger("* * * * *", DAY0, overlap_policy="buffer_one")
    allowed = await setup.trigger("* * * * *", DAY0, overlap_policy="allow")
    scheduler = setup.scheduler()
    for i in range(3):
        await scheduler.run_once(DAY0 + i * MIN + SEC)
    assert [(r["status"], r["reason_code"]) for r in await setup.runs(buffered["id"])] == [
        ("pending", None), ("pending", "buffered"), ("skipped", "previous_run_active")]
    assert [r["status"] for r in await setup.runs(allowed["id"])] == ["pending"] * 3


async def test_the_handler_rechecks_state_and_records_a_no_op_with_its_reason(setup, ctx):
    trigger = await setup.trigger("0 9 * * *", DAY0)
    await ctx.pool.execute("UPDATE autopilot SET status = 'paused' WHERE id = $1", setup.autopilot["id"])
    await setup.scheduler().run_once(DAY0 + SEC)
    assert await setup.runs(trigger["id"]) == []
    (execution,) = await setup.executions(trigger["id"])
    assert execution["status"] == "SUCCESS"
    assert execution["result"] == {"noop": True, "reason": "autopilot_paused"}
    assert (await setup.trigger_row(trigger["id"]))["next_fire_at"] == DAY0 + timedelta(days=1)


async def test_a_disabled_trigger_is_not_due_and_costs_nothing(setup, ctx):
    trigger = await setup.trigger("0 9 * * *", DAY0)
    async with ctx.pool.acquire() as conn:
        await conn.execute("UPDATE autopilot_trigger SET enabled = false WHERE id = $1", trigger["id"])
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN SELECT id FROM autopilot_trigger WHERE kind = 'schedule' AND enabled AND deleted_at IS NULL"
            " AND next_fire_at <= now() ORDER BY next_fire_at LIMIT 10"))
    assert "autopilot_trigger_due_idx" in plan
    await setup.scheduler().run_once(DAY0 + SEC)
    assert await setup.executions(trigger["id"]) == []


async def test_the_newest_plan_of_a_scope_is_read_backwards_from_the_claims_unique_index(setup, ctx):
    trigger = await setup.trigger("* * * * *", DAY0)
    await setup.scheduler().run_once(DAY0 + SEC)
    async with ctx.pool.acquire() as conn:
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN SELECT plan_time FROM sys_cron_executions WHERE job_name = $1 AND scope_kind = 'trigger'"
            " AND scope_id = $2 ORDER BY plan_time DESC LIMIT 1", SCHEDULE_JOB, str(trigger["id"])))
        indexes = {r[0] for r in await conn.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'sys_cron_executions'")}
    # One index on the claim's key serves the planner's watermark: every execution row maintains no second one.
    assert "Scan Backward using sys_cron_executions_job_name_scope_kind_scope_id_plan_time_key" in plan
    assert "sys_cron_executions_scope_idx" not in indexes


async def _fire_through(setup, trigger_id, until):
    """Tick like the real service: at each stored next_fire_at (plus a second), until ``until``."""
    scheduler = setup.scheduler()
    while True:
        at = (await setup.trigger_row(trigger_id))["next_fire_at"]
        if at > until:
            return [r["planned_at"] for r in await setup.runs(trigger_id)]
        await scheduler.run_once(at + SEC)


async def test_dst_europe_berlin_gap_fires_once_at_the_next_valid_instant_and_repeated_hour_once(setup):
    daily = await setup.trigger("30 2 * * *", utc(2027, 3, 27, 1, 30), "Europe/Berlin", overlap_policy="allow")
    # 2027-03-28 02:30 does not exist in Berlin: it fires at 03:00 CEST = 01:00 UTC.
    assert await _fire_through(setup, daily["id"], utc(2027, 3, 29, 12)) == [
        utc(2027, 3, 27, 1, 30), utc(2027, 3, 28, 1, 0), utc(2027, 3, 29, 0, 30)]
    autumn = await setup.trigger("30 2 * * *", utc(2027, 10, 30, 0, 30), "Europe/Berlin", overlap_policy="allow")
    # 2027-10-31 02:30 happens twice: it fires once, at the first (CEST, 00:30 UTC).
    assert await _fire_through(setup, autumn["id"], utc(2027, 11, 1, 12)) == [
        utc(2027, 10, 30, 0, 30), utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30)]
    await setup.scheduler().run_once(utc(2027, 10, 31, 1, 30, 30))  # the second 02:30, local
    assert len(await setup.runs(autumn["id"])) == 3


async def test_dst_america_new_york_fixed_times_and_hourly_across_both_transitions(setup):
    spring = await setup.trigger("30 2 * * *", utc(2027, 3, 13, 7, 30), "America/New_York", overlap_policy="allow")
    assert await _fire_through(setup, spring["id"], utc(2027, 3, 15, 12)) == [
        utc(2027, 3, 13, 7, 30), utc(2027, 3, 14, 7, 0), utc(2027, 3, 15, 6, 30)]
    fall = await setup.trigger("30 1 * * *", utc(2027, 11, 6, 5, 30), "America/New_York", overlap_policy="allow")
    assert await _fire_through(setup, fall["id"], utc(2027, 11, 8, 12)) == [
        utc(2027, 11, 6, 5, 30), utc(2027, 11, 7, 5, 30), utc(2027, 11, 8, 6, 30)]
    hourly = await setup.trigger("0 * * * *", utc(2027, 11, 7, 4), "America/New_York", overlap_policy="allow")
    # 01:00 EDT and 01:00 EST both fire: an interval cron keeps firing every real hour.
    assert await _fire_through(setup, hourly["id"], utc(2027, 11, 7, 8)) == [
        utc(2027, 11, 7, h) for h in range(4, 9)]


def test_the_cached_fast_path_agrees_with_cron_latest_only():
    from scheduler.cron import latest_only

    schedule = Schedule.parse("*/7 * * * *", "Europe/Berlin")
    start = utc(2027, 3, 28, 0, 0)
    for step in range(0, 400, 3):
        now = start + step * 17 * SEC
        for last in (None, now - 30 * MIN, now - 3 * MIN):
            hint = schedule.latest_in(now - timedelta(hours=2), now)
            fast = newest_due(schedule, last, now, hint=hint, anchor=start)
            assert fast == latest_only(schedule, last, now, anchor=start), (now, last)


async def test_the_service_wakes_early_on_a_trigger_change_instead_of_waiting_its_max_tick(setup, ctx):
    trigger = await setup.trigger("* * * * *", utc(2030, 1, 1))
    scheduler = setup.scheduler(dsn=ctx.dsn, max_tick=30)
    service = asyncio.create_task(scheduler.run())
    try:
        await asyncio.sleep(0.3)  # asleep now, for up to 30 s: nothing is due before 2030
        async with ctx.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                """UPDATE autopilot_trigger SET next_fire_at = date_trunc('minute', clock_timestamp()),
                          last_fired_at = date_trunc('minute', clock_timestamp()) - interval '1 minute'
                   WHERE id = $1""", trigger["id"])
            await conn.execute("SELECT pg_notify('hookgate_triggers', $1)", str(trigger["id"]))
        started = asyncio.get_running_loop().time()
        while not await setup.runs(trigger["id"]):
            assert asyncio.get_running_loop().time() - started < 5, "the NOTIFY did not wake the scheduler"
            await asyncio.sleep(0.02)
    finally:
        await scheduler.stop(deadline=5)
        await asyncio.wait_for(service, 5)


async def test_a_run_the_admission_gate_refuses_is_recorded_skipped_with_its_reason(setup):
    from tests import factories

    runtime = await factories.pull_agent(setup.world)  # no instance ever heartbeated: not ready
    offline = await factories.autopilot(setup.world, runtime.row["id"], title="offline")
    trigger = await factories.schedule_trigger(setup.world, offline, "0 9 * * *", DAY0)
    ready = await setup.trigger("0 9 * * *", DAY0)
    await setup.scheduler().run_once(DAY0 + SEC)
    (run,) = await setup.runs(trigger["id"])
    assert (run["status"], run["reason_code"]) == ("skipped", "runtime_offline")
    assert run["reason"]
    assert [r["status"] for r in await setup.runs(ready["id"])] == ["pending"]


async def test_one_failing_trigger_fails_alone_when_its_batch_is_split(setup, ctx):
    good = await setup.trigger("0 9 * * *", DAY0)
    bad = await setup.trigger("0 9 * * *", DAY0)
    await ctx.pool.execute(f"""
        CREATE FUNCTION test_refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.trigger_id = '{bad["id"]}' THEN RAISE EXCEPTION 'bad trigger'; END IF; RETURN NEW; END $$;
        CREATE TRIGGER test_refuse_one BEFORE INSERT ON autopilot_run
            FOR EACH ROW EXECUTE FUNCTION test_refuse_one();""")
    await setup.scheduler().run_once(DAY0 + SEC)
    assert [r["status"] for r in await setup.runs(good["id"])] == ["pending"]
    assert await setup.runs(bad["id"]) == []
    (failed,) = await setup.executions(bad["id"])
    assert (failed["status"], failed["error_code"]) == ("FAILED", "handler_error")
    assert "bad trigger" in failed["error_message"]
    assert (await setup.executions(good["id"]))[0]["status"] == "SUCCESS"


async def _tx(ctx, table, key, value):
    return await ctx.pool.fetchval(f"SELECT xmin::text FROM {table} WHERE {key} = $1", value)


async def test_an_on_time_occurrence_is_claimed_handled_and_recorded_in_one_transaction(setup, ctx):
    trigger = await setup.trigger("0 9 * * *", DAY0)
    await setup.scheduler().run_once(DAY0 + SEC)
    (run,) = await setup.runs(trigger["id"])
    (execution,) = await setup.executions(trigger["id"])
    assert (execution["status"], execution["attempt"], execution["result"]["run_id"]) == ("SUCCESS", 1, str(run["id"]))
    # The run and the execution row (inserted SUCCESS: never RUNNING, never updated) were written by one
    # (sub)transaction, which committed with the planner's trigger update.
    tx = await _tx(ctx, "sys_cron_executions", "id", execution["id"])
    assert await _tx(ctx, "autopilot_run", "id", run["id"]) == tx
    assert (execution["started_at"], execution["finished_at"]) == (DAY0 + SEC, DAY0 + SEC)


async def test_a_session_ending_inside_the_transaction_leaves_the_occurrence_due_and_it_fires_once(setup, ctx):
    trigger = await setup.trigger("0 9 * * *", DAY0)
    async with run_inserts_held(ctx):  # the run insert waits here
        dying = asyncio.create_task(setup.scheduler(concurrency=1).run_once(DAY0 + SEC))
        # Its session ends (as when its process dies) before the attempt gave up on the lock: nothing of it
        # was committed.
        assert await ctx.pool.fetchval("SELECT pg_terminate_backend($1)", await waiting_run_insert(ctx))
        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            await asyncio.wait_for(dying, 10)
    assert await setup.executions(trigger["id"]) == [] and await setup.runs(trigger["id"]) == []
    assert (await setup.trigger_row(trigger["id"]))["next_fire_at"] == DAY0  # still due
    await setup.scheduler().run_once(DAY0 + 30 * SEC)
    (run,) = await setup.runs(trigger["id"])
    (execution,) = await setup.executions(trigger["id"])
    assert (run["planned_at"], execution["status"], execution["attempt"]) == (DAY0, "SUCCESS", 1)


async def test_buffer_one_runs_start_one_at_a_time_in_order_even_when_two_wait(setup, ctx):
    trigger = await setup.trigger("* * * * *", DAY0, overlap_policy="buffer_one")
    scheduler, worker = setup.scheduler(), RunWorker(ctx, holder="t")
    await scheduler.run_once(DAY0 + SEC)
    assert await worker.run_once() == 1  # the first starts
    await scheduler.run_once(DAY0 + MIN + SEC)
    assert await worker.run_once() == 0  # the second waits behind it
    first, second = await setup.runs(trigger["id"])
    async with ctx.pool.acquire() as conn, conn.transaction():  # the first run is cancelled
        await conn.fetchrow(Q.run_finish, first["id"], "cancelled", "run_cancelled", None)
        await lifecycle.cancel_tasks(conn, first["id"], "run_cancelled", None)
    # Before a worker starts the second, a third is admitted: it waits behind the second, not beside it.
    await scheduler.run_once(DAY0 + 2 * MIN + SEC)
    assert await worker.run_once() == 1
    assert await worker.run_once() == 0
    _, second, third = await setup.runs(trigger["id"])
    assert (second["status"], second["reason_code"]) == ("queued", None)
    assert (third["status"], third["reason_code"], third["task_id"]) == ("pending", "buffered", None)


async def test_a_service_whose_due_trigger_is_held_elsewhere_pauses_between_ticks_then_fires_it(setup, ctx):
    trigger = await setup.trigger("* * * * *", utc(2030, 1, 1))
    ticks = []

    class Counted(Scheduler):
        async def tick(self, now: datetime | None = None) -> TickReport:
            ticks.append(asyncio.get_running_loop().time())
            return await super().tick(now)

    scheduler = Counted(ctx.pool, [autopilot_schedule_job(heartbeat_timeout_s=120.0)], SchedulerConfig(max_tick=30))
    async with ctx.pool.acquire() as holder:
        holding = holder.transaction()
        await holding.start()
        # Due now, but locked by another scheduler's batch in flight (here: a transaction that holds the row).
        await holder.execute(
            """UPDATE autopilot_trigger SET next_fire_at = date_trunc('minute', clock_timestamp()),
                      last_fired_at = date_trunc('minute', clock_timestamp()) - interval '1 minute'
               WHERE id = $1""", trigger["id"])
        await holding.commit()
        holding = holder.transaction()
        await holding.start()
        await holder.execute("SELECT 1 FROM autopilot_trigger WHERE id = $1 FOR UPDATE", trigger["id"])
        service = asyncio.create_task(scheduler.run())
        try:
            try:
                await asyncio.sleep(1.0)
                # Paused between ticks (BUSY_DUE_PAUSE_S), not ticking back to back on a row it cannot take.
                assert 2 <= len(ticks) <= 1.0 / BUSY_DUE_PAUSE_S + 2
                assert await setup.runs(trigger["id"]) == []
            finally:
                await holding.rollback()  # the other batch rolled back: the trigger is claimed within a pause
            started = asyncio.get_running_loop().time()
            while not await setup.runs(trigger["id"]):
                assert asyncio.get_running_loop().time() - started < 2, "the released trigger did not fire"
                await asyncio.sleep(0.02)
        finally:
            await scheduler.stop(deadline=5)
            await asyncio.wait_for(service, 5)
