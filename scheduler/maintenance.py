"""Maintenance jobs on the shared scheduler: retention and the auto-pause monitor (DESIGN §6, §8).

Each runs once per interval across all replicas (latest-only: no burst after downtime). The lease
watchdog of the dispatch area plugs in the same way, as a one-line :func:`scheduler.jobs.maintenance`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from autopilot import audit, rules
from hookgate.database import Conn
from scheduler.spec import Batch, Every, JobRun, JobSpec, LatestOnly
from sql import Q

#: The auto-pause rule: at least this many finished runs in the window, at least this share failed.
AUTO_PAUSE_WINDOW = timedelta(days=7)
AUTO_PAUSE_MIN_RUNS = 50
AUTO_PAUSE_FAILED_SHARE = 0.9


async def _drain(batch: Batch, run: JobRun, query: str, *args: Any) -> int:
    """Repeat a batched retention statement until it touches fewer rows than a batch, or the lease goes."""
    total = 0
    size = args[-1]
    while not run.lease_lost.is_set():
        async with batch.pool.acquire() as conn:
            touched: int = await conn.fetchval(query, *args)
        total += touched
        if touched < size:
            break
    return total


def retention_job(age: timedelta, batch_size: int, every: timedelta = timedelta(hours=1)) -> JobSpec:
    """Drop raw bodies of finished deliveries and delete finished executions older than ``age``.

    In batches of ``batch_size``, each its own short transaction, so live traffic is never blocked.
    """

    async def handler(batch: Batch) -> None:
        for run in batch.runs:
            cutoff = run.now - age
            bodies = await _drain(batch, run, Q.delivery_drop_bodies, cutoff, batch_size)
            executions = await _drain(batch, run, Q.cron_delete_finished, cutoff, batch_size)
            run.result = {"cutoff": cutoff.isoformat(), "bodies_dropped": bodies, "executions_deleted": executions}

    return JobSpec(name="retention", handler=handler, cadence=Every(every),
                   catch_up=LatestOnly(late_after=every), max_plans_per_tick=1, max_attempts=1)


async def _pause(conn: Conn, row: Any) -> bool:
    """Pause one failing autopilot with a system rule version and an AUTO_PAUSE audit entry."""
    async with conn.transaction():
        changed = await conn.fetchrow(Q.autopilot_set_status, row["autopilot_id"], "paused")
        if changed is None:
            return False
        await rules.publish(conn, row["autopilot_id"], "auto_pause", rules.Publisher.system())
        await audit.record(
            conn, "AUTO_PAUSE", actor_type="system", actor_id=None, subject_type="autopilot",
            subject_id=row["autopilot_id"], workspace_id=changed["workspace_id"],
            detail={"finished_runs": row["finished"], "failed_runs": row["failed"],
                    "window_days": AUTO_PAUSE_WINDOW.days, "threshold": AUTO_PAUSE_FAILED_SHARE},
        )
    return True


def auto_pause_job(every: timedelta = timedelta(minutes=5)) -> JobSpec:
    """Pause autopilots whose runs mostly fail: ≥ 50 finished runs in 7 days with ≥ 90 % failed."""

    async def handler(batch: Batch) -> None:
        for run in batch.runs:
            async with batch.pool.acquire() as conn:
                rows = await conn.fetch(Q.run_failure_rates, run.now, AUTO_PAUSE_WINDOW.total_seconds(),
                                        AUTO_PAUSE_MIN_RUNS, AUTO_PAUSE_FAILED_SHARE)
                paused = [str(row["autopilot_id"]) for row in rows if await _pause(conn, row)]
            run.result = {"paused": paused}

    return JobSpec(name="auto_pause", handler=handler, cadence=Every(every),
                   catch_up=LatestOnly(late_after=every), max_plans_per_tick=1, max_attempts=1)
