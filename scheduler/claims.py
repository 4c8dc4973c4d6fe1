"""Sweeping, planning and claiming: how a tick decides which executions this runner holds.

Abandoned RUNNING rows are failed first (runner gone, or past ``stale_after``); due retries are taken over
by one guarded UPDATE that rotates the lease token; new plans (cadence and catch-up mode, or the job's own
planner) are claimed by ``INSERT … ON CONFLICT DO NOTHING`` in key order: whoever inserts the row owns the
occurrence, and two schedulers racing cannot deadlock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from hookgate.database import Conn
from scheduler.clock import Clock
from scheduler.execution import Executor
from scheduler.liveness import LOCK_SPACE
from scheduler.spec import CustomPlans, EveryPlan, JobRun, JobSpec, LatestOnly, Plan, Scan
from sql import Q

log = logging.getLogger("hookgate.scheduler")

_FAR_PAST = timedelta(days=366)


@contextlib.asynccontextmanager
async def planned_afresh(pool: asyncpg.Pool) -> AsyncIterator[Conn]:
    """A pooled connection in a transaction whose statements are planned for the tables as they are now.

    For the tick's statements on ``sys_cron_executions`` (sweeps, takeovers, the next-wake read): a cached
    generic plan made while the table was small keeps scanning it whole after a herd (``cron_plan_afresh``).
    """
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(Q.cron_plan_afresh)
        yield conn


async def sweep_abandoned(conn: Conn, jobs: Sequence[JobSpec], at: datetime) -> tuple[int, int]:
    """Fail the RUNNING rows whose runner is gone (at once), then those past stale_after (the fallback).

    Returns ``(gone, stale)``. The fallback covers a dead runner whose session lingers (PostgreSQL has not
    noticed yet), and two runners' keys colliding, which only makes a dead runner look alive.
    """
    gone = await conn.fetch(Q.cron_sweep_gone, [spec.name for spec in jobs],
                            [spec.stale_reentry for spec in jobs], at, LOCK_SPACE)
    for row in gone:
        log.warning("execution's runner is gone", extra={
            "job": row["job_name"], "scope": row["scope_id"], "plan_time": row["plan_time"].isoformat(),
            "runner": row["runner_id"]})
    stale = 0
    for spec in jobs:
        rows = await conn.fetch(Q.cron_sweep_stale, spec.name, at, spec.stale_reentry)
        stale += len(rows)
        for row in rows:
            log.warning("execution went stale", extra={"job": spec.name, "scope": row["scope_id"],
                                                       "plan_time": row["plan_time"].isoformat()})
    return len(gone), stale


def cadence_plans(spec: JobSpec, last: datetime | None, until: datetime) -> list[datetime]:
    """The plans of one scope of a cadence job under its catch-up mode."""
    assert spec.cadence is not None
    after = last or until - _FAR_PAST
    if isinstance(spec.catch_up, EveryPlan):
        after = max(after, until - spec.catch_up.window)
        count = min(spec.catch_up.max_per_tick, spec.max_plans_per_tick)
        return spec.cadence.occurrences(after, until, count)
    newest = spec.cadence.latest_in(after, until)
    late_after = spec.catch_up.late_after if isinstance(spec.catch_up, LatestOnly) else None
    if newest is None or (late_after is not None and until - newest > late_after):
        return []
    return [newest]


async def plan(conn: Conn, spec: JobSpec, now: datetime, limit: int, scan: Scan | None = None) -> list[Plan]:
    """Up to ``limit`` new plans of a job: its custom planner's (resuming after ``scan``), or its cadence's."""
    if isinstance(spec.catch_up, CustomPlans):
        return await spec.catch_up.plans(conn, now, limit, Scan() if scan is None else scan)
    scopes = await spec.scopes(conn, now) if spec.scopes else ["-"]
    until = now - spec.schedule_delay
    plans: list[Plan] = []
    for row in await conn.fetch(Q.cron_scope_state, spec.name, spec.scope_kind, scopes):
        if spec.single_flight and row["in_flight"]:
            continue
        found = cadence_plans(spec, row["last_plan"], until)[:spec.max_plans_per_tick]
        plans += [Plan(row["scope_id"], t) for t in found]
    return plans[:limit]


@dataclass(frozen=True)
class Claimer:
    """One tick's claims: this runner's id and liveness key, the tick's clock, and who runs what it claims."""

    pool: asyncpg.Pool
    runner_id: str
    lock_key: int
    clock: Clock
    executor: Executor
    stopping: asyncio.Event
    claim_batch: int

    async def take_over(self, spec: JobSpec, at: datetime) -> int:
        """Take over the job's due retries and stale re-entries (one guarded UPDATE) and start them."""
        async with planned_afresh(self.pool) as conn:
            rows = await conn.fetch(Q.cron_takeover, spec.name, at, self.runner_id,
                                    spec.stale_timeout.total_seconds(), spec.stale_reentry, self.claim_batch,
                                    self.lock_key)
        return self.start(spec, rows, at)

    async def claim_fresh(self, spec: JobSpec, at: datetime) -> int:
        """Plan and claim new occurrences, ``claim_batch`` per transaction, starting each batch's handlers."""
        total, scan = 0, Scan()
        while not self.stopping.is_set():
            async with self.pool.acquire() as conn, conn.transaction():
                plans = await plan(conn, spec, at, self.claim_batch, scan)
                rows = await self.claim(conn, spec, plans, at) if plans else []
            total += self.start(spec, rows, at)
            if len(plans) < self.claim_batch or not rows or spec.cadence is not None:
                break
            at = await self.clock.now()
        return total

    async def claim(self, conn: Conn, spec: JobSpec, plans: list[Plan], now: datetime) -> list[asyncpg.Record]:
        """Claim ``plans`` RUNNING for this runner (the ones another scheduler holds conflict: not returned)."""
        ordered = sorted(plans, key=lambda p: (p.scope_id, p.plan_time))
        return await conn.fetch(
            Q.cron_claim, spec.name, spec.scope_kind, [p.scope_id for p in ordered],
            [p.plan_time for p in ordered], spec.max_attempts, self.runner_id, now,
            spec.stale_timeout.total_seconds(), spec.single_flight, self.lock_key,
        )

    def start(self, spec: JobSpec, rows: list[asyncpg.Record], at: datetime) -> int:
        """Hand claimed rows to the executor, on this tick's clock."""
        return self.executor.start(spec, [JobRun.from_row(spec.name, r, at) for r in rows], self.clock)
