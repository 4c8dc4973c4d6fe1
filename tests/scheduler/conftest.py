"""Scheduler test helpers: a world with a ready agent and autopilot, schedule triggers, and readers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from hookgate import database
from hookgate.context import Context
from scheduler.jobs import autopilot_schedule_job
from scheduler.manager import Scheduler, SchedulerConfig
from scheduler.spec import JobSpec
from tests import factories


def utc(*args: int) -> datetime:
    """A UTC datetime."""
    return datetime(*args, tzinfo=UTC)


@dataclass
class Setup:
    """A workspace, an HTTP agent (always ready) and an active run_only autopilot."""

    ctx: Context
    world: factories.World
    autopilot: asyncpg.Record

    async def trigger(self, cron: str, next_fire_at: datetime, timezone: str = "UTC", **kw: Any) -> asyncpg.Record:
        """A schedule trigger of the autopilot."""
        return await factories.schedule_trigger(self.world, self.autopilot, cron, next_fire_at, timezone, **kw)

    def scheduler(self, jobs: list[JobSpec] | None = None, **kw: Any) -> Scheduler:
        """An in-process scheduler over the test pool (time injected through run_once(now=…))."""
        default = [autopilot_schedule_job(heartbeat_timeout_s=120.0)]
        return Scheduler(self.ctx.pool, jobs if jobs is not None else default, SchedulerConfig(**kw))

    async def runs(self, trigger_id: Any) -> list[asyncpg.Record]:
        """The trigger's runs, by planned time."""
        return await self.ctx.pool.fetch(
            "SELECT * FROM autopilot_run WHERE trigger_id = $1 ORDER BY planned_at, created_at", trigger_id)

    async def executions(self, scope_id: Any, job: str = "autopilot_schedule_dispatch") -> list[asyncpg.Record]:
        """The job's execution rows for a scope, by plan time."""
        return await self.ctx.pool.fetch(
            "SELECT * FROM sys_cron_executions WHERE job_name = $1 AND scope_id = $2 ORDER BY plan_time",
            job, str(scope_id))

    async def trigger_row(self, trigger_id: Any) -> asyncpg.Record:
        """The trigger as stored now."""
        row = await self.ctx.pool.fetchrow("SELECT * FROM autopilot_trigger WHERE id = $1", trigger_id)
        assert row is not None
        return row


@pytest.fixture
async def setup(ctx: Context) -> Setup:
    """A world with a ready HTTP agent and an active run_only autopilot."""
    world = await factories.world(ctx)
    agent = await factories.http_agent(world)
    autopilot = await factories.autopilot(world, agent.row["id"])
    return Setup(ctx, world, autopilot)


async def break_run_inserts(ctx: Context) -> None:
    """Make every insert into ``autopilot_run`` fail (as a run store that is down would) until repaired."""
    await ctx.pool.execute("""
        CREATE FUNCTION test_refuse_runs() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'run store unavailable'; END $$;
        CREATE TRIGGER test_refuse_runs BEFORE INSERT ON autopilot_run
            FOR EACH ROW EXECUTE FUNCTION test_refuse_runs();""")


async def repair_run_inserts(ctx: Context) -> None:
    """Undo :func:`break_run_inserts`."""
    await ctx.pool.execute("DROP TRIGGER test_refuse_runs ON autopilot_run")


@contextlib.asynccontextmanager
async def run_inserts_held(ctx: Context) -> AsyncIterator[None]:
    """Hold a SHARE lock on ``autopilot_run`` in another session for the block: every run insert waits for it."""
    blocker = await database.connect(ctx.dsn)
    held = blocker.transaction()
    await held.start()
    await blocker.execute("LOCK TABLE autopilot_run IN SHARE MODE")
    try:
        yield
    finally:
        await held.rollback()
        await blocker.close()


async def waiting_run_insert(ctx: Context) -> int:
    """The backend pid of a session waiting for :func:`run_inserts_held`'s lock, once one does (at most 5 s)."""
    for _ in range(500):
        pid = await ctx.pool.fetchval("SELECT pid FROM pg_locks WHERE relation = 'autopilot_run'::regclass "
                                      "AND NOT granted")
        if pid:
            return int(pid)
        await asyncio.sleep(0.01)
    raise AssertionError("no session waits for the lock on autopilot_run")
