"""The lease watchdog (DESIGN §7): expired task leases back to the queue, silent runtimes offline.

:func:`sweep` is what the scheduler's ``lease_watchdog`` maintenance job runs every 60 s (:func:`sweep_job`).
The worker role also runs it from :class:`WatchdogLoop` (every ``watchdog_interval_s``), so a deployment
without a scheduler still recovers abandoned work; concurrent sweeps are safe (SKIP LOCKED, guarded
updates), so running both is harmless.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from autopilot import dispatch, lifecycle
from hookgate import metrics
from hookgate.context import Context
from hookgate.database import Conn
from sql import Q
from worker.loop import PollingService


@dataclass(frozen=True)
class Sweep:
    """What one sweep did."""

    requeued: int
    failed: int
    offline: int


async def sweep(conn: Conn, *, heartbeat_timeout_s: float, now: datetime | None = None) -> Sweep:
    """Mark silent runtime instances offline, then requeue (EXPIRE) tasks whose lease ended.

    Tasks held by an instance that just went offline are expired too; a task with no attempt left fails,
    and its run with it.
    """
    async with conn.transaction():
        offline = await conn.fetch(Q.instance_expire, heartbeat_timeout_s, now)
        rows = await conn.fetch(Q.task_expire, now, [r["agent_id"] for r in offline],
                                [r["instance"] for r in offline])
        failed = [r for r in rows if r["status"] == "failed"]
        metrics.LEASE_EXPIRIES.labels("tasks").inc(len(rows))
        for row in failed:
            await lifecycle.task_finished(conn, row["run_id"], "failed", "lease expired")
        # One wake-up per agent with requeued work: claim long-polls are routed by the task id's agent.
        requeued = {r["agent_id"]: r["id"] for r in rows if r["status"] == "queued"}
        for task_id in requeued.values():
            await conn.execute(Q.notify_send, dispatch.TASKS_CHANNEL, str(task_id))
    return Sweep(len(rows) - len(failed), len(failed), len(offline))


def sweep_job(heartbeat_timeout_s: float) -> Callable[[Conn], Awaitable[dict[str, Any]]]:
    """The sweep as the scheduler's maintenance work (``scheduler.jobs.maintenance``): JSON-able result."""

    async def work(conn: Conn) -> dict[str, Any]:
        return asdict(await sweep(conn, heartbeat_timeout_s=heartbeat_timeout_s))

    return work


class WatchdogLoop(PollingService):
    """Runs :func:`sweep` every ``watchdog_interval_s`` (until the scheduler's maintenance job takes over)."""

    name = "watchdog"

    def __init__(self, ctx: Context) -> None:
        super().__init__(interval=ctx.settings.watchdog_interval_s)
        self.ctx = ctx

    async def run_once(self) -> int:
        """One sweep; always reports idle so the loop waits a full interval."""
        async with self.ctx.pool.acquire() as conn:
            await sweep(conn, heartbeat_timeout_s=self.ctx.settings.heartbeat_timeout_s)
        return 0
