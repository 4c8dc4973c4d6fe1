"""Transactional jobs: fresh plans claimed, handled and recorded SUCCESS in one transaction per batch.

For a job with ``JobSpec(transactional=fn)``: plan up to ``batch_size``, then, in a savepoint with a short
lock timeout, ``fn(conn, batch)`` and the execution rows inserted already SUCCESS (``cron_claim_done``, or the
handler's own statement through the same ``hookgate_cron_claim_done``); one commit makes the claim, the
handler's writes and the SUCCESS visible together. If the attempt fails, the savepoint rolls back and the same
plans are claimed RUNNING in the same transaction for the ordinary handler.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from uuid import UUID

import asyncpg

from hookgate import metrics
from hookgate.database import Conn
from scheduler.claims import Claimer, plan
from scheduler.execution import ms, results_json
from scheduler.spec import Batch, Claim, CustomPlans, JobRun, JobSpec, Plan, Scan, SchedulerError
from sql import Q

log = logging.getLogger("hookgate.scheduler")

#: How long a transactional attempt may wait for one lock before it gives up and its plans are claimed the
#: ordinary way (a RUNNING row, heartbeats, liveness): an attempt is meant to take milliseconds, and its
#: plans are not durably claimed until it commits.
ATTEMPT_LOCK_TIMEOUT = timedelta(seconds=1)

#: The lease token of a transactional run until its row exists (it is never written).
_NO_LEASE = UUID(int=0)


class _Contended(SchedulerError):
    """A transactional attempt found some of its plans claimed by another scheduler: it must roll back."""


async def claim_fresh_in_transactions(claimer: Claimer, spec: JobSpec, at: datetime, concurrency: int) -> int:
    """Plan, handle and record fresh plans of a transactional job, ``batch_size`` per transaction.

    A custom planner locks what it plans (the autopilot planner: its triggers, SKIP LOCKED), so
    ``concurrency`` workers split the due plans; a cadence job's planner locks nothing, so one worker.
    The workers share one :class:`Scan`: each batch's planner resumes after what the tick has read so far.
    Waits for them, so that the next tick does not find their scopes still due.
    """
    count = concurrency if isinstance(spec.catch_up, CustomPlans) else 1
    scan = Scan()
    outcomes = await asyncio.gather(*[_batches(claimer, spec, at, scan) for _ in range(count)],
                                    return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return sum(o for o in outcomes if isinstance(o, int))


async def _batches(claimer: Claimer, spec: JobSpec, at: datetime, scan: Scan) -> int:
    """One worker: batch after batch until the planner has fewer than a batch left, or nothing was claimed."""
    total = 0
    while not claimer.stopping.is_set():
        async with claimer.executor.slots:
            planned, finished, rows = await _plan_and_attempt(claimer, spec, at, scan)
        metrics.scheduler_started(spec.name, [(r.plan_time, r.now) for r in finished])
        total += len(finished) + claimer.start(spec, rows, at)
        if planned < spec.batch_size or not (finished or rows):  # as claim_fresh: nothing claimed, stop
            break
        at = await claimer.clock.now()
    return total


async def _plan_and_attempt(
    claimer: Claimer, spec: JobSpec, at: datetime, scan: Scan
) -> tuple[int, list[JobRun], list[asyncpg.Record]]:
    """One transaction: plan up to ``batch_size``, then handle and record them, or claim them RUNNING.

    Returns how many were planned, the runs finished here, and the claim rows of an ordinary claim
    (when the transactional attempt failed: they are handed to the ordinary handler).
    """
    async with claimer.pool.acquire() as conn, conn.transaction():
        # A frozen holder must not keep its scopes locked (and unclaimed) for long: within run_timeout
        # its session ends, the transaction rolls back and the plans are due again, on time.
        await conn.execute(Q.cron_hold_guard, ms(spec.run_timeout))
        plans = await plan(conn, spec, at, spec.batch_size, scan)
        if not plans:
            return 0, [], []
        plans.sort(key=lambda p: (p.scope_id, p.plan_time))
        finished = await _attempt(claimer, conn, spec, plans, at)
        if finished is not None:
            return len(plans), finished, []
        return len(plans), [], await claimer.claim(conn, spec, plans, at)


async def _attempt(claimer: Claimer, conn: Conn, spec: JobSpec, plans: list[Plan], at: datetime) -> list[JobRun] | None:
    """The transactional attempt, in a savepoint: the handler's writes and the SUCCESS rows, or nothing.

    None when it failed (the handler raised, a lock wait or statement ran too long, or another
    scheduler won a plan): everything it wrote is rolled back and the caller claims the plans.
    """
    assert spec.transactional is not None
    runs = [JobRun(0, spec.name, p.scope_id, p.plan_time, 1, spec.max_attempts, _NO_LEASE, at) for p in plans]
    batch = Batch(spec, runs, claimer.pool, at, claimer.clock, plans=plans,
                  claim=Claim(claimer.runner_id, claimer.lock_key))
    try:
        async with conn.transaction():
            await conn.execute(Q.cron_attempt_limits, ms(ATTEMPT_LOCK_TIMEOUT), ms(spec.run_timeout))
            claimed = await spec.transactional(conn, batch)
            rows = claimed if claimed is not None else await conn.fetch(
                Q.cron_claim_done, spec.name, spec.scope_kind, [r.scope_id for r in runs],
                [r.plan_time for r in runs], spec.max_attempts, claimer.runner_id, at,
                spec.stale_timeout.total_seconds(), spec.single_flight, claimer.lock_key,
                await claimer.clock.now(), results_json(runs))
            if len(rows) != len(runs):
                raise _Contended(f"{len(runs) - len(rows)} plan(s) of the batch are claimed elsewhere")
    except Exception as exc:
        log.warning("transactional attempt rolled back; claiming its plans the ordinary way",
                    extra={"job": spec.name, "plans": len(plans), "error": f"{exc.__class__.__name__}: {exc}"})
        return None
    won = {(row["scope_id"], row["plan_time"]): row for row in rows}
    for run in runs:
        row = won[(run.scope_id, run.plan_time)]
        run.id, run.lease_token, run.finished = row["id"], row["lease_token"], True
    return runs
