"""``run_deadlines`` (every ``HOOKGATE_DEADLINE_SWEEP_S``, 5 s by default): overdue runs fail, their tasks stop.

An autopilot with ``run_timeout_s`` gives each run that long from its creation (or its latest retry). A run
still unfinished after that ends ``failed`` with reason ``deadline_exceeded``, and its queued and running tasks
are cancelled as a run cancel does (``autopilot.lifecycle.cancel_tasks``): a push in flight is aborted, a pull
runtime's next renew or report gets 409 ``cancelled``. Overdue runs are locked ``FOR UPDATE SKIP LOCKED`` in
batches, each batch one transaction, so sweeps running at once (several schedulers, a late execution) take
different runs and never end one twice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from autopilot import audit, lifecycle
from hookgate.database import Conn
from scheduler.maintenance.periodic import periodic_job
from scheduler.spec import JobSpec
from sql import Q

NAME = "run_deadlines"
#: Overdue runs ended per transaction.
BATCH = 200


@dataclass(frozen=True)
class Sweep:
    """What one sweep did."""

    runs_failed: int
    tasks_cancelled: int


async def sweep(conn: Conn, *, now: datetime | None = None, batch: int = BATCH) -> Sweep:
    """End every overdue run (failed, deadline_exceeded) and cancel its tasks, ``batch`` runs per transaction."""
    runs = tasks = 0
    while True:
        async with conn.transaction():
            ended = await conn.fetch(Q.run_fail_overdue, batch, now)
            for run in ended:
                cancelled = await lifecycle.cancel_tasks(conn, run["id"], "deadline_exceeded", run["workspace_id"])
                await audit.record(conn, "RUN_DEADLINE", actor_type="system", actor_id=None, subject_type="run",
                                   subject_id=run["id"], workspace_id=run["workspace_id"],
                                   detail={"tasks_cancelled": len(cancelled)})
                tasks += len(cancelled)
        runs += len(ended)
        if len(ended) < batch:
            return Sweep(runs, tasks)


def run_deadlines_job(every: timedelta) -> JobSpec:
    """The sweep as a maintenance job; its result is the :class:`Sweep`."""

    async def work(conn: Conn) -> dict[str, Any]:
        return asdict(await sweep(conn))

    return periodic_job(NAME, every, work)
