"""The shape every maintenance job shares: once per interval across all schedulers, latest-only.

Latest-only with ``late_after = every``, so a scheduler down for hours runs the job once, not once per
missed interval; one attempt, since the next interval is the retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from hookgate.database import Conn
from scheduler.spec import Batch, Every, Handler, JobSpec, LatestOnly

#: Maintenance work: one call with a pooled connection; returns a JSON-able result.
Work = Callable[[Conn], Awaitable[Any]]


def periodic_spec(name: str, every: timedelta, handler: Handler) -> JobSpec:
    """A maintenance job spec: ``handler`` once per ``every`` across all schedulers, never a burst."""
    return JobSpec(name=name, handler=handler, cadence=Every(every), catch_up=LatestOnly(late_after=every),
                   max_plans_per_tick=1, max_attempts=1)


def periodic_job(name: str, every: timedelta, work: Work) -> JobSpec:
    """A one-line maintenance job: ``work(conn)`` once per ``every``; its result is the execution's result.

    E.g. ``periodic_job("lease_watchdog", timedelta(seconds=60), work)``.
    """

    async def handler(batch: Batch) -> None:
        async with batch.pool.acquire() as conn:
            result = await work(conn)
        for run in batch.runs:
            run.result = result if isinstance(result, dict) else {"result": result}

    return periodic_spec(name, every, handler)
