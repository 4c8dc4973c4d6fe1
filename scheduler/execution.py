"""Running claimed executions: handlers in batches under a run timeout, heartbeats, guarded terminal writes.

Every write of a claimed execution is guarded by its lease token: a heartbeat or terminal write that matches
no row means another scheduler swept or took it over, so the run is told (``lease_lost``) and its result is
ignored, never written over the new holder's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

import asyncpg

from hookgate import database, metrics
from hookgate.database import Conn
from hookgate.errors import LeaseLost
from scheduler.clock import Clock
from scheduler.spec import Batch, JobRun, JobSpec
from sql import Q

log = logging.getLogger("hookgate.scheduler")

#: What a failed run records: ``(error_code, error_message)``.
Failure = tuple[str, str]


def ms(delay: timedelta) -> str:
    """A duration as a PostgreSQL setting value (``'1500ms'``)."""
    return f"{int(delay.total_seconds() * 1000)}ms"


def _ids_tokens(runs: Sequence[JobRun]) -> tuple[list[int], list[object]]:
    return [r.id for r in runs], [r.lease_token for r in runs]


def results_json(runs: Sequence[JobRun]) -> list[str | None]:
    """The runs' results as the JSON the execution rows store."""
    return [None if r.result is None else json.dumps(r.result) for r in runs]


async def hold(conn: Conn, runs: Sequence[JobRun], stale_timeout: timedelta) -> list[JobRun]:
    """Lock the runs whose lease is still ours for the caller's transaction; the others are told they lost it.

    The transaction may not sit idle longer than ``stale_timeout``, or PostgreSQL ends the session.
    """
    await conn.execute(Q.cron_hold_guard, ms(stale_timeout))
    held = {row["id"] for row in await conn.fetch(Q.cron_hold, *_ids_tokens(runs))}
    for run in runs:
        if run.id not in held:
            run.lease_lost.set()
    return [run for run in runs if run.id in held]


async def succeed_in(conn: Conn, runs: Sequence[JobRun], now: datetime) -> None:
    """Record SUCCESS for ``runs`` inside the caller's transaction; raises LeaseLost if any is not ours."""
    if not runs:
        return
    done = await conn.fetch(Q.cron_succeed, *_ids_tokens(runs), results_json(runs), now)
    if len(done) != len(runs):
        raise LeaseLost(f"{len(runs) - len(done)} execution(s) no longer held")
    for run in runs:
        run.finished = True


class Executor:
    """Runs the handlers of claimed executions in the background, at most ``concurrency`` batches at a time.

    ``slots`` is shared with the transactional attempts, which count against the same concurrency.
    """

    def __init__(self, pool: asyncpg.Pool, concurrency: int) -> None:
        self.pool = pool
        self.slots = asyncio.Semaphore(concurrency)
        self.inflight: set[asyncio.Task[None]] = set()

    def start(self, spec: JobSpec, runs: list[JobRun], clock: Clock) -> int:
        """Start the handlers of claimed runs in batches of ``batch_size``, on ``clock``; returns how many."""
        metrics.scheduler_started(spec.name, [(r.plan_time, r.now) for r in runs])
        for i in range(0, len(runs), spec.batch_size):
            chunk = runs[i:i + spec.batch_size]
            task = asyncio.create_task(self._execute(Batch(spec, chunk, self.pool, chunk[0].now, clock)))
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)
        return len(runs)

    async def drain(self) -> None:
        """Wait until every started handler (and the terminal writes after it) is done."""
        while self.inflight:
            await asyncio.gather(*list(self.inflight), return_exceptions=True)

    async def stop(self, deadline: float) -> None:
        """Let running handlers finish within ``deadline`` seconds, then cancel them (recorded ``shutdown``)."""
        if not self.inflight:
            return
        _, late = await asyncio.wait(set(self.inflight), timeout=deadline)
        for task in late:
            task.cancel()
        for task in late:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _execute(self, batch: Batch) -> None:
        async with self.slots:
            error = await self._call(batch)
        if error is not None:
            # A raising handler's transaction rolled back: nothing it marked finished was committed. Rows
            # it did commit are no longer RUNNING, so the guarded FAILED write leaves them alone.
            for run in batch.runs:
                run.finished = False
        if error is not None and len(batch.runs) > 1:
            # One bad scope must not fail its neighbours: retry the batch one run at a time.
            for run in batch.runs:
                run.result, run.finished = None, False
                await self._execute(Batch(batch.spec, [run], self.pool, run.now, batch.clock))
            return
        try:
            await self._finish(batch, error)
        except database.DATABASE_ERRORS as exc:
            log.warning("terminal write failed; the lease will go stale", extra={"job": batch.spec.name,
                                                                                "error": str(exc)})

    async def _call(self, batch: Batch) -> Failure | None:
        """Run the handler under its run timeout and heartbeats; returns (code, message) on failure."""
        spec, runs = batch.spec, batch.runs
        handler: asyncio.Task[None] = asyncio.ensure_future(spec.handler(batch))
        beats = asyncio.create_task(self._heartbeat(batch, handler))
        try:
            async with asyncio.timeout(spec.run_timeout.total_seconds()):
                await handler
        except TimeoutError:
            return "run_timeout", f"the handler ran longer than {spec.run_timeout}"
        except asyncio.CancelledError:
            if all(r.lease_lost.is_set() for r in runs):
                return None
            handler.cancel()
            await self._finish(batch, ("shutdown", "the scheduler stopped before the handler finished"))
            raise
        except LeaseLost as exc:  # a guard inside the handler's transaction: its work was rolled back
            return "lease_lost", str(exc)
        except Exception as exc:
            log.exception("handler failed", extra={"job": spec.name})
            return "handler_error", f"{exc.__class__.__name__}: {exc}"
        finally:
            beats.cancel()
        return None

    async def _heartbeat(self, batch: Batch, handler: asyncio.Task[None]) -> None:
        """Extend the leases every ``heartbeat``; a run whose lease is gone is told.

        The handler is cancelled once no run of its batch is held any more.
        """
        spec, runs = batch.spec, batch.runs
        while True:
            await asyncio.sleep(spec.heartbeat.total_seconds())
            live = [r for r in runs if not r.finished and not r.lease_lost.is_set()]
            if not live:
                return
            now = await batch.clock.now()
            async with self.pool.acquire() as conn:
                held = {row["id"] for row in await conn.fetch(
                    Q.cron_heartbeat, *_ids_tokens(live), now, spec.stale_timeout.total_seconds())}
            for run in live:
                if run.id not in held and not run.finished:
                    log.warning("lease lost", extra={"job": spec.name, "scope": run.scope_id})
                    run.lease_lost.set()
            if all(r.lease_lost.is_set() or r.finished for r in runs):
                handler.cancel()
                return

    async def _finish(self, batch: Batch, error: Failure | None) -> None:
        """Terminal writes for runs the handler did not finish itself, guarded by the lease token."""
        spec = batch.spec
        pending = [r for r in batch.runs if not r.finished and not r.lease_lost.is_set()]
        if not pending:
            return
        now = await batch.clock.now()
        async with self.pool.acquire() as conn:
            if error is None:
                rows = await conn.fetch(Q.cron_succeed, *_ids_tokens(pending), results_json(pending), now)
            else:
                retry = [spec.retry_at(r.attempt, now) for r in pending]
                rows = await conn.fetch(Q.cron_fail, *_ids_tokens(pending), now, error[0], error[1], retry)
                metrics.SCHEDULER_PLANS.labels(spec.name, "failed").inc(len(rows))
                failed = [r for r in pending if r.id in {row["id"] for row in rows}]
                if failed and spec.on_failure is not None:
                    await spec.on_failure(conn, failed, now)
        written = {row["id"] for row in rows}
        for run in pending:
            if run.id in written:
                run.finished = True
            else:
                log.warning("late result ignored: lease lost", extra={"job": spec.name, "scope": run.scope_id})
                run.lease_lost.set()
