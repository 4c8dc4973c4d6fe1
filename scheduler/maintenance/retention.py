"""``retention`` (hourly): what no one needs any more goes, in short batches that never block live traffic.

Raw bodies of finished deliveries, finished executions and sent or failed notifications older than
``HOOKGATE_RETENTION_AGE_DAYS`` (the delivery row itself stays until ``HOOKGATE_DELIVERY_RETENTION_DAYS``, and
task attempts go with their partition: :mod:`~scheduler.maintenance.partitions`), and Idempotency-Keys past
their 5-minute replay window (a claim takes an expired key over, so deleting one changes no answer; without
this the table only grows), and expired dashboard sessions (an expired one finds no member; logging out
deletes a session at once, but one left to expire would stay).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from scheduler.maintenance.periodic import periodic_spec
from scheduler.spec import Batch, JobRun, JobSpec
from sql import Q

NAME = "retention"


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
    """Drop old raw bodies, delete old executions and notifications, expired Idempotency-Keys and sessions.

    In batches of ``batch_size``, each its own short transaction.
    """

    async def handler(batch: Batch) -> None:
        for run in batch.runs:
            cutoff = run.now - age
            bodies = await _drain(batch, run, Q.delivery_drop_bodies, cutoff, batch_size)
            executions = await _drain(batch, run, Q.cron_delete_finished, cutoff, batch_size)
            notifications = await _drain(batch, run, Q.notification_delete_finished, cutoff, batch_size)
            keys = await _drain(batch, run, Q.idempotency_delete_expired, run.now, batch_size)
            sessions = await _drain(batch, run, Q.dashboard_session_delete_expired, run.now, batch_size)
            run.result = {"cutoff": cutoff.isoformat(), "bodies_dropped": bodies, "executions_deleted": executions,
                          "notifications_deleted": notifications, "idempotency_keys_deleted": keys,
                          "dashboard_sessions_deleted": sessions}

    return periodic_spec(NAME, every, handler)
