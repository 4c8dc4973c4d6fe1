"""``lease_watchdog`` (every 60 s): silent runtimes offline, expired task leases back to the queue.

:func:`sweep` is the work; the worker's ``WatchdogLoop`` (``worker.watchdog``) runs it too, so a deployment
without a scheduler still recovers abandoned work. Concurrent sweeps are safe (SKIP LOCKED, guarded
updates), so running both is harmless. Runtimes going offline and the expiry of the tasks they held are one
step, in one transaction: a task held by an instance that just went offline is expired in the same sweep.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from autopilot import lifecycle
from hookgate import metrics, notify
from hookgate.database import Conn
from scheduler.maintenance.periodic import periodic_job
from scheduler.spec import JobSpec
from sql import Q

NAME = "lease_watchdog"
EVERY = timedelta(seconds=60)


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
            await conn.execute(Q.notify_send, notify.TASKS, str(task_id))
    return Sweep(len(rows) - len(failed), len(failed), len(offline))


def lease_watchdog_job(heartbeat_timeout_s: float) -> JobSpec:
    """The sweep as a maintenance job, with the settings' heartbeat timeout; its result is the :class:`Sweep`."""

    async def work(conn: Conn) -> dict[str, Any]:
        return asdict(await sweep(conn, heartbeat_timeout_s=heartbeat_timeout_s))

    return periodic_job(NAME, EVERY, work)
