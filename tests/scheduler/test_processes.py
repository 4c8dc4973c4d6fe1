"""``hookgate scheduler`` OS processes over one database: each occurrence fires once, a crash blocks nothing."""

import asyncio
import signal
import socket
import time
from datetime import timedelta

import pytest

from scheduler.jobs import SCHEDULE_JOB
from scheduler.liveness import LOCK_SPACE
from tests.scheduler.conftest import run_inserts_held

TRIGGERS = 40


async def _wait_for_runs(ctx, planned_at, count, procs, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await ctx.pool.fetchval("SELECT count(*) FROM autopilot_run WHERE planned_at = $1", planned_at)
        if found >= count:
            return found
        for proc in procs:
            assert proc.popen.poll() is None, proc.output()
        await asyncio.sleep(0.1)
    raise AssertionError(f"only {found} of {count} runs for {planned_at}:\n" + procs[0].output())


async def _clock_offset(ctx, at):
    """The environment of a scheduler process whose clock reads ``at`` now (a test-only offset from the database's)."""
    db_now = await ctx.pool.fetchval("SELECT clock_timestamp()")
    return {"HOOKGATE_SCHEDULER_CLOCK_OFFSET_S": str((at - db_now).total_seconds()), "HOOKGATE_POOL_MIN_SIZE": "1"}


async def _poll(ctx, query, *args, procs=(), timeout=30.0):
    """The first truthy value of ``query`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await ctx.pool.fetchval(query, *args)
        if found:
            return found
        for proc in procs:
            assert proc.popen.poll() is None, proc.output()
        await asyncio.sleep(0.05)
    raise AssertionError(f"not seen within {timeout}s: {query}\n" + "".join(p.output() for p in procs))


def _stop(procs):
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        # 0: drained and exited; -SIGTERM: stopped while still starting up (before its signal handlers).
        assert proc.wait(15) in (0, -signal.SIGTERM), proc.output()
        assert "Traceback" not in proc.output(), proc.output()


@pytest.mark.parametrize("count", [2, 3])
async def test_scheduler_processes_racing_fire_each_occurrence_exactly_once(setup, ctx, spawn, count):
    db_now = await ctx.pool.fetchval("SELECT clock_timestamp()")
    first = (db_now + timedelta(days=1)).replace(second=0, microsecond=0)
    triggers = [await setup.trigger("* * * * *", first, overlap_policy="allow") for _ in range(TRIGGERS)]
    for minute in range(2):
        planned = first + timedelta(minutes=minute)
        # Test-only clock offset: the processes live 3 s before `planned` on the database clock, so they
        # are all up and asleep when the occurrence falls due, and wake to race for it.
        env = await _clock_offset(ctx, planned - timedelta(seconds=3))
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


async def test_a_scheduler_killed_while_firing_does_not_block_the_triggers_next_occurrence(setup, ctx, spawn):
    db_now = await ctx.pool.fetchval("SELECT clock_timestamp()")
    planned = (db_now + timedelta(days=1)).replace(second=0, microsecond=0)
    following = planned + timedelta(minutes=1)
    trigger = await setup.trigger("* * * * *", planned, overlap_policy="allow")
    scope = str(trigger["id"])
    # Hold back every run insert, so the victim is caught mid-firing: its execution RUNNING and locked by
    # its handler's transaction, which waits on this lock.
    async with run_inserts_held(ctx):
        victim = spawn.start("scheduler", extra_env=await _clock_offset(ctx, planned - timedelta(seconds=3)))
        key = await _poll(ctx, "SELECT runner_lock FROM sys_cron_executions WHERE job_name = $1 AND scope_id = $2 "
                               "AND status = 'RUNNING' AND runner_id = $3",
                          SCHEDULE_JOB, scope, f"{socket.gethostname()}:{victim.popen.pid}", procs=[victim])
        await _poll(ctx, "SELECT count(*) FROM pg_locks WHERE relation = 'autopilot_run'::regclass AND NOT granted",
                    procs=[victim])
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        # PostgreSQL ends the dead process's idle sessions at once, its liveness lock with them. The backend
        # stuck in the insert finds its client gone, and rolls back, once the insert can go on.
        await _poll(ctx, "SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
                         "AND classid = $1::oid AND objid = $2::oid AND objsubid = 2)", LOCK_SPACE, key)
    # Less than a minute after the crash (stale_after is five), a new scheduler retries the occurrence and
    # fires the next one on time.
    successor = spawn.start("scheduler", extra_env=await _clock_offset(ctx, following - timedelta(seconds=10)))
    assert await _wait_for_runs(ctx, following, 1, [successor], timeout=60) == 1
    _stop([successor])
    async with ctx.pool.acquire() as conn:
        runs = await conn.fetch("SELECT planned_at FROM autopilot_run WHERE trigger_id = $1 ORDER BY planned_at",
                                trigger["id"])
        executions = await conn.fetch("SELECT * FROM sys_cron_executions WHERE job_name = $1 AND scope_id = $2 "
                                      "ORDER BY plan_time", SCHEDULE_JOB, scope)
    assert [r["planned_at"] for r in runs] == [planned, following]
    by = f"{socket.gethostname()}:{successor.popen.pid}"
    assert [(e["plan_time"], e["status"], e["attempt"], e["runner_id"]) for e in executions] == [
        (planned, "SUCCESS", 2, by), (following, "SUCCESS", 1, by)]
    assert executions[1]["started_at"] - following < timedelta(seconds=2)  # fired on time, not deferred
    assert "runner is gone" in successor.output()
