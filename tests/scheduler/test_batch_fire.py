"""Schedule occurrences fire set-based: a batch of due triggers per statement, each occurrence exactly once."""

import asyncio
import logging
import signal
from datetime import timedelta

from hookgate import database
from scheduler.jobs import SCHEDULE_JOB, autopilot_schedule_job, plan_due
from scheduler.manager import Scheduler, SchedulerConfig
from scheduler.spec import Scan
from tests import factories
from tests.plans import logged_plans
from tests.scheduler.conftest import break_run_inserts, repair_run_inserts, run_inserts_held, utc, waiting_run_insert

MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
DAY0 = utc(2027, 2, 1, 9, 0)  # a Monday, after every trigger's creation
HERD = 300
BATCH = 40


async def _herd(setup, ctx, count, cron, first, **columns):
    """``count`` schedule triggers of the setup's autopilot, made by one statement (as a large install has them)."""
    return await ctx.pool.fetch(
        """INSERT INTO autopilot_trigger (workspace_id, autopilot_id, kind, cron, timezone, overlap_policy,
                                          next_fire_at, last_fired_at, published_by_type, published_by_id)
           SELECT $1, $2, 'schedule', $3, 'UTC', $4, $5, $6, 'member', $7 FROM generate_series(1, $8)
           RETURNING id""",
        setup.world.workspace_id, setup.autopilot["id"], cron, columns.get("overlap", "allow"), first,
        columns.get("last_fired_at"), setup.world.owner_id, count)


def _scheduler(ctx, **kw):
    return Scheduler(ctx.pool, [autopilot_schedule_job(BATCH, heartbeat_timeout_s=120.0)],
                     SchedulerConfig(**({"concurrency": 2} | kw)))


async def _fired(ctx, plan):
    async with ctx.pool.acquire() as conn:
        runs = await conn.fetch("SELECT id, trigger_id, status, xmin::text AS tx FROM autopilot_run "
                                "WHERE planned_at = $1", plan)
        executions = await conn.fetch(
            "SELECT scope_id, status, attempt, result, xmin::text AS tx FROM sys_cron_executions "
            "WHERE job_name = $1 AND plan_time = $2", SCHEDULE_JOB, plan)
    return runs, executions


async def test_a_herd_fires_exactly_once_in_batches_with_two_schedulers_racing(setup, ctx, caplog):
    triggers = {row["id"] for row in await _herd(setup, ctx, HERD, "* * * * *", DAY0)}
    caplog.set_level(logging.WARNING, logger="hookgate.scheduler")
    reports = await asyncio.gather(_scheduler(ctx).run_once(DAY0 + SEC), _scheduler(ctx).run_once(DAY0 + SEC))
    assert sum(r.claimed[SCHEDULE_JOB] for r in reports) == HERD
    runs, executions = await _fired(ctx, DAY0)
    assert sorted(r["trigger_id"] for r in runs) == sorted(triggers)  # one run per trigger, none twice
    assert {r["status"] for r in runs} == {"pending"}
    assert sorted(e["scope_id"] for e in executions) == sorted(str(t) for t in triggers)
    assert {(e["status"], e["attempt"]) for e in executions} == {("SUCCESS", 1)}
    by_run = {str(r["id"]): r for r in runs}
    assert all(by_run[e["result"]["run_id"]]["tx"] == e["tx"] for e in executions)  # claim and run: one statement
    # Set-based: one transaction fired a whole batch, not one per trigger (seven full batches, and at most one
    # partial batch per worker: two schedulers, two workers each); no batch fell back to the slow path.
    assert len({e["tx"] for e in executions}) <= HERD // BATCH + 4
    assert "rolled back" not in caplog.text
    # The next tick finds nothing due: each trigger moved to its next occurrence.
    assert (await _scheduler(ctx).run_once(DAY0 + 30 * SEC)).claimed[SCHEDULE_JOB] == 0


async def test_catch_up_stays_latest_only_for_a_whole_batch(setup, ctx):
    # Down since 09:00:01: the hourly herd missed 10:00 to 15:00. Each trigger fires 15:00 only, once.
    hourly = await _herd(setup, ctx, 60, "0 * * * *", utc(2027, 2, 1, 10), last_fired_at=DAY0)
    daily = await _herd(setup, ctx, 60, "0 15 * * *", utc(2027, 2, 1, 15))
    await _scheduler(ctx).run_once(utc(2027, 2, 1, 15, 4, 59))
    runs, _ = await _fired(ctx, utc(2027, 2, 1, 15))
    assert sorted(r["trigger_id"] for r in runs) == sorted(t["id"] for t in hourly + daily)
    assert await ctx.pool.fetchval("SELECT count(*) FROM autopilot_run") == 120
    # Down again until 21:05:01: 21:00 is more than 5 minutes late; nothing fires, no burst, and every
    # trigger waits for its next occurrence.
    late = await _scheduler(ctx).run_once(utc(2027, 2, 1, 21, 5, 1))
    assert late.claimed[SCHEDULE_JOB] == 0
    async with ctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM autopilot_run") == 120
        moved = await conn.fetch("SELECT next_fire_at, count(*) FROM autopilot_trigger GROUP BY 1 ORDER BY 1")
    assert [(m["next_fire_at"], m["count"]) for m in moved] == [(utc(2027, 2, 1, 22), 60), (utc(2027, 2, 2, 15), 60)]


async def test_one_batch_gives_each_occurrence_its_own_verdict(setup, ctx):
    allow = await setup.trigger("* * * * *", DAY0, overlap_policy="allow")
    skip = await setup.trigger("* * * * *", DAY0, overlap_policy="skip")
    buffer = await setup.trigger("* * * * *", DAY0, overlap_policy="buffer_one")
    runtime = await factories.pull_agent(setup.world)  # never heartbeated: the gate refuses
    offline = await factories.schedule_trigger(
        setup.world, await factories.autopilot(setup.world, runtime.row["id"], title="offline"), "* * * * *", DAY0)
    paused_autopilot = await factories.autopilot(setup.world, (await factories.http_agent(setup.world)).row["id"],
                                                 title="paused")
    paused = await factories.schedule_trigger(setup.world, paused_autopilot, "* * * * *", DAY0)
    async with ctx.pool.acquire() as conn:
        await conn.execute("UPDATE autopilot SET status = 'paused' WHERE id = $1", paused_autopilot["id"])
        for trigger in (skip, buffer):  # each has an unfinished run already
            await conn.execute(
                """INSERT INTO autopilot_run (workspace_id, autopilot_id, trigger_id, source, status, planned_at)
                   VALUES ($1, $2, $3, 'schedule', 'queued', $4)""",
                setup.world.workspace_id, setup.autopilot["id"], trigger["id"], DAY0 - MIN)
    report = await _scheduler(ctx).run_once(DAY0 + SEC)
    assert report.claimed[SCHEDULE_JOB] == 5
    runs, executions = await _fired(ctx, DAY0)
    assert len({e["tx"] for e in executions}) == 1  # one batch
    found = {r["trigger_id"]: r for r in runs}
    rows = await ctx.pool.fetch("SELECT trigger_id, status, reason_code, finished_at FROM autopilot_run "
                                "WHERE planned_at = $1", DAY0)
    detail = {r["trigger_id"]: (r["status"], r["reason_code"], r["finished_at"] is not None) for r in rows}
    assert detail == {
        allow["id"]: ("pending", None, False),
        skip["id"]: ("skipped", "previous_run_active", True),
        buffer["id"]: ("pending", "buffered", False),
        offline["id"]: ("skipped", "runtime_offline", True),
    }
    results = {e["scope_id"]: e["result"] for e in executions}
    assert results[str(paused["id"])] == {"noop": True, "reason": "autopilot_paused"}
    assert results[str(allow["id"])] == {"run_id": str(found[allow["id"]]["id"]), "status": "pending",
                                        "reason_code": None, "reused": False}
    assert results[str(buffer["id"])]["reason_code"] == "buffered"


async def test_an_autopilot_paused_while_its_batch_fires_is_not_fired(setup, ctx):
    trigger = await setup.trigger("0 9 * * *", DAY0)
    other = await setup.trigger("0 9 * * *", DAY0)
    async with run_inserts_held(ctx):  # the fire statement waits here
        firing = asyncio.create_task(_scheduler(ctx, concurrency=1).run_once(DAY0 + SEC))
        await waiting_run_insert(ctx)
        # Planned (triggers locked, next_fire_at moved) but not fired yet: the autopilot is paused now.
        await ctx.pool.execute("UPDATE autopilot SET status = 'paused' WHERE id = $1", setup.autopilot["id"])
    await asyncio.wait_for(firing, 10)
    assert await setup.runs(trigger["id"]) == [] and await setup.runs(other["id"]) == []
    for scope in (trigger["id"], other["id"]):
        (execution,) = await setup.executions(scope)
        assert (execution["status"], execution["result"]) == ("SUCCESS", {"noop": True, "reason": "autopilot_paused"})
        # Claimed the ordinary way (the attempt rolled back with its trigger writes): the handler moved the
        # trigger on, so it is not due again before its next occurrence.
        row = await setup.trigger_row(scope)
        assert (row["last_fired_at"], row["next_fire_at"]) == (DAY0, DAY0 + timedelta(days=1))
    assert (await _scheduler(ctx).run_once(DAY0 + 30 * SEC)).claimed[SCHEDULE_JOB] == 0


async def test_a_trigger_deleted_between_its_claim_and_its_retry_is_not_fired(setup, ctx):
    trigger = await setup.trigger("* * * * *", DAY0)
    await break_run_inserts(ctx)
    scheduler = _scheduler(ctx)
    await scheduler.run_once(DAY0 + SEC)
    (failed,) = await setup.executions(trigger["id"])
    assert (failed["status"], failed["attempt"]) == ("FAILED", 1)  # claimed, waiting for its retry
    await repair_run_inserts(ctx)
    await ctx.pool.execute("UPDATE autopilot_trigger SET deleted_at = now(), enabled = false WHERE id = $1",
                           trigger["id"])
    await scheduler.run_once(failed["next_retry_at"])
    (row,) = await setup.executions(trigger["id"])
    assert (row["status"], row["attempt"], row["result"]) == ("SUCCESS", 2, {"noop": True, "reason": "trigger_deleted"})
    assert await setup.runs(trigger["id"]) == []


async def test_scheduler_processes_share_a_herd_batch_by_batch_and_fire_it_once(setup, ctx, spawn):
    db_now = await ctx.pool.fetchval("SELECT clock_timestamp()")
    planned = (db_now + timedelta(days=1)).replace(second=0, microsecond=0)
    triggers = {row["id"] for row in await _herd(setup, ctx, HERD, "* * * * *", planned)}
    offset = (planned - timedelta(seconds=3) - db_now).total_seconds()
    env = {"HOOKGATE_SCHEDULER_CLOCK_OFFSET_S": str(offset), "HOOKGATE_POOL_MIN_SIZE": "1",
           "HOOKGATE_SCHEDULER_CLAIM_BATCH": str(BATCH), "HOOKGATE_SCHEDULER_CONCURRENCY": "2"}
    procs = [spawn.start("scheduler", extra_env=env) for _ in range(2)]
    try:
        for _ in range(600):
            runs, executions = await _fired(ctx, planned)
            if len(executions) >= HERD:
                break
            for proc in procs:
                assert proc.popen.poll() is None, proc.output()
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a duplicate would have to appear now
    finally:
        for proc in procs:
            proc.signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(15)
    runs, executions = await _fired(ctx, planned)
    assert sorted(r["trigger_id"] for r in runs) == sorted(triggers)
    assert sorted(e["scope_id"] for e in executions) == sorted(str(t) for t in triggers)
    assert {(e["status"], e["attempt"]) for e in executions} == {("SUCCESS", 1)}
    assert len({e["tx"] for e in executions}) <= HERD // BATCH + 4
    for proc in procs:
        assert "Traceback" not in proc.output() and "rolled back" not in proc.output(), proc.output()


async def _planned(ctx, scan, limit):
    """The planner's plans in a transaction rolled back afterwards (as an attempt that failed)."""
    async with ctx.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            return [p.scope_id for p in await plan_due(conn, DAY0 + SEC, limit, scan)]
        finally:
            await transaction.rollback()


async def test_a_ticks_planners_resume_after_their_cursor_and_what_they_skipped_fires_at_the_next_tick(setup, ctx):
    triggers = sorted(row["id"] for row in await _herd(setup, ctx, 6, "* * * * *", DAY0))
    scan = Scan()
    assert await _planned(ctx, scan, 2) == [str(t) for t in triggers[:2]]
    assert scan.after == (DAY0, triggers[1])
    # The fourth is locked elsewhere while the tick reads on: it is skipped, and stays behind the cursor.
    async with ctx.pool.acquire() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM autopilot_trigger WHERE id = $1 FOR UPDATE", triggers[3])
        # Not the first two again, although they are still due (their transaction rolled back): the cursor.
        assert await _planned(ctx, scan, 10) == [str(t) for t in (triggers[2], triggers[4], triggers[5])]
    assert await _planned(ctx, scan, 10) == []
    # A new tick starts from the beginning: every trigger fires, once.
    report = await _scheduler(ctx).run_once(DAY0 + 2 * SEC)
    assert report.claimed[SCHEDULE_JOB] == 6
    runs, _ = await _fired(ctx, DAY0)
    assert sorted(r["trigger_id"] for r in runs) == triggers


async def test_the_planners_read_probes_by_index_after_its_plan_was_made_on_small_tables(setup, ctx):
    # A connection's prepared statements get a cached generic plan from their sixth call on, made from the
    # statistics of that moment. The planner's read must not keep scanning sys_cron_executions whole for each
    # due trigger once the table has grown (no ANALYZE in between: autovacuum off, or not there yet).
    triggers = await _herd(setup, ctx, 20, "* * * * *", DAY0)
    conn = await database.connect(ctx.dsn)
    try:
        await conn.execute("ALTER TABLE sys_cron_executions SET (autovacuum_enabled = false)")
        await conn.execute("ANALYZE sys_cron_executions")  # empty
        for _ in range(8):
            await _planned_on(conn, Scan(), 5)
        await conn.execute(  # the history of a herd: 20,000 finished occurrences of other triggers
            """INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status, attempt,
                                                max_attempts, runner_id, lease_token, heartbeat_at, stale_after,
                                                started_at, single_flight, runner_lock, finished_at, duration_ms)
               SELECT $1, 'trigger', gen_random_uuid()::text, $2, 'SUCCESS', 1, 3, 'old', gen_random_uuid(),
                      $2, $2, $2, true, 1, $2, 0
               FROM generate_series(1, 20000)""", SCHEDULE_JOB, DAY0 - MIN)
        async with logged_plans(conn) as plans:
            planned = await _planned_on(conn, Scan(), 5)
    finally:
        await conn.close()
    assert planned == sorted(str(t["id"]) for t in triggers)[:5]
    text = "\n".join(plans)
    assert "sys_cron_executions" in text  # the read's own plan was logged
    assert "Seq Scan on sys_cron_executions" not in text, text


async def _planned_on(conn, scan, limit):
    """The planner's plans on ``conn``, in a transaction rolled back afterwards."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        return sorted(p.scope_id for p in await plan_due(conn, DAY0 + SEC, limit, scan))
    finally:
        await transaction.rollback()
