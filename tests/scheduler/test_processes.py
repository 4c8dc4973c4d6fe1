"""Several ``hookgate scheduler`` OS processes over one database: each occurrence fires exactly once."""

import asyncio
import signal
import time
from datetime import timedelta

import pytest

from scheduler.jobs import SCHEDULE_JOB

TRIGGERS = 40


async def _wait_for_runs(ctx, planned_at, count, procs, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with ctx.pool.acquire() as conn:
            found = await conn.fetchval("SELECT count(*) FROM autopilot_run WHERE planned_at = $1", planned_at)
        if found >= count:
            return found
        for proc in procs:
            assert proc.popen.poll() is None, proc.output()
        await asyncio.sleep(0.1)
    raise AssertionError(f"only {found} of {count} runs for {planned_at}:\n" + procs[0].output())


def _stop(procs):
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        # 0: drained and exited; -SIGTERM: stopped while still starting up (before its signal handlers).
        assert proc.wait(15) in (0, -signal.SIGTERM), proc.output()
        assert "Traceback" not in proc.output(), proc.output()


@pytest.mark.parametrize("count", [2, 3])
async def test_scheduler_processes_racing_fire_each_occurrence_exactly_once(setup, ctx, spawn, count):
    async with ctx.pool.acquire() as conn:
        db_now = await conn.fetchval("SELECT clock_timestamp()")
    first = (db_now + timedelta(days=1)).replace(second=0, microsecond=0)
    triggers = [await setup.trigger("* * * * *", first, overlap_policy="allow") for _ in range(TRIGGERS)]
    for minute in range(2):
        planned = first + timedelta(minutes=minute)
        # Test-only clock offset: the processes live 3 s before `planned` on the database clock, so they
        # are all up and asleep when the occurrence falls due, and wake to race for it.
        async with ctx.pool.acquire() as conn:
            db_now = await conn.fetchval("SELECT clock_timestamp()")
        offset = (planned - timedelta(seconds=3) - db_now).total_seconds()
        env = {"HOOKGATE_SCHEDULER_CLOCK_OFFSET_S": str(offset), "HOOKGATE_POOL_MIN_SIZE": "1"}
        procs = [spawn.start("scheduler", extra_env=env) for _ in range(count)]
        assert await _wait_for_runs(ctx, planned, TRIGGERS, procs) == TRIGGERS
        await asyncio.sleep(0.5)  # a duplicate would have to appear now
        _stop(procs)
    async with ctx.pool.acquire() as conn:
        runs = await conn.fetch("SELECT trigger_id, planned_at FROM autopilot_run")
        executions = await conn.fetch("SELECT status, attempt, runner_id FROM sys_cron_executions "
                                      "WHERE job_name = $1", SCHEDULE_JOB)
    assert len(runs) == 2 * TRIGGERS
    assert {(r["trigger_id"], r["planned_at"]) for r in runs} == {
        (t["id"], first + timedelta(minutes=m)) for t in triggers for m in range(2)}
    assert len(executions) == 2 * TRIGGERS
    assert {(e["status"], e["attempt"]) for e in executions} == {("SUCCESS", 1)}
