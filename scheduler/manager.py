"""The scheduler service: every replica ticks, PostgreSQL decides who runs each occurrence (DESIGN §8).

A tick, on the database clock: make sure this runner holds its liveness lock (``scheduler.liveness``;
without it, it claims nothing); mark FAILED the RUNNING rows whose runner's lock is gone, and those past
``stale_after``; per job, take over due retries (one guarded UPDATE rotating the lease token) and claim
new plans (``INSERT … ON CONFLICT DO NOTHING``); run the handlers with heartbeats; record SUCCESS or FAILED
guarded by the token. Between ticks it sleeps until the next due time (bounded by ``max_tick``, and by
``liveness_poll`` while another runner holds executions) and wakes early on NOTIFY ``hookgate_triggers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

import asyncpg

from hookgate import database, metrics
from hookgate.database import Conn
from scheduler.liveness import LOCK_SPACE, Liveness
from scheduler.spec import Batch, CustomPlans, EveryPlan, JobRun, JobSpec, LatestOnly, LeaseLost, Plan, SchedulerError
from sql import Q

log = logging.getLogger("hookgate.scheduler")

TRIGGERS_CHANNEL = "hookgate_triggers"
_FAR_PAST = timedelta(days=366)
#: How long a transactional attempt may wait for one lock before it gives up and its plans are claimed the
#: ordinary way (a RUNNING row, heartbeats, liveness): an attempt is meant to take milliseconds, and its
#: plans are not durably claimed until it commits.
FUSE_LOCK_TIMEOUT = timedelta(seconds=1)

#: A clock override for tests: returns "now" (timezone-aware UTC) instead of the database clock.
Clock = Callable[[], Awaitable[datetime]]


@dataclass
class TickReport:
    """What one tick did: rows swept (runner gone, or past stale_after) and executions claimed, per job."""

    now: datetime
    #: RUNNING rows failed because they were past stale_after.
    swept: int = 0
    #: RUNNING rows failed ``runner_gone`` because their runner's liveness lock was not held.
    gone: int = 0
    #: False when this runner did not hold its own liveness lock, so it claimed nothing.
    live: bool = True
    claimed: dict[str, int] = field(default_factory=dict)


class _Contended(SchedulerError):
    """A transactional attempt found some of its plans claimed by another scheduler: it must roll back."""


#: The lease token of a transactional run until its row exists (it is never written).
_NO_LEASE = UUID(int=0)


def _ms(delay: timedelta) -> str:
    return f"{int(delay.total_seconds() * 1000)}ms"


def _ids_tokens(runs: Sequence[JobRun]) -> tuple[list[int], list[object]]:
    return [r.id for r in runs], [r.lease_token for r in runs]


async def hold(conn: Conn, runs: Sequence[JobRun], stale_timeout: timedelta) -> list[JobRun]:
    """Lock the runs whose lease is still ours for the caller's transaction; the others are told they lost it.

    The transaction may not sit idle longer than ``stale_timeout``, or PostgreSQL ends the session.
    """
    await conn.execute(Q.cron_hold_guard, _ms(stale_timeout))
    held = {row["id"] for row in await conn.fetch(Q.cron_hold, *_ids_tokens(runs))}
    for run in runs:
        if run.id not in held:
            run.lease_lost.set()
    return [run for run in runs if run.id in held]


async def succeed_in(conn: Conn, runs: Sequence[JobRun], now: datetime) -> None:
    """Record SUCCESS for ``runs`` inside the caller's transaction; raises LeaseLost if any is not ours."""
    if not runs:
        return
    results = [None if r.result is None else json.dumps(r.result) for r in runs]
    done = await conn.fetch(Q.cron_succeed, *_ids_tokens(runs), results, now)
    if len(done) != len(runs):
        raise LeaseLost(f"{len(runs) - len(done)} execution(s) no longer held")
    for run in runs:
        run.finished = True


class Scheduler:
    """The DB-backed scheduler service: ``run()`` until ``stop()``, or ``run_once()`` in tests.

    ``liveness_poll``: while another runner holds RUNNING executions, look again at least this often (s),
    so that if it dies its executions are retried within seconds.
    """

    name = "scheduler"

    def __init__(
        self, pool: asyncpg.Pool, jobs: Sequence[JobSpec], *, dsn: str | None = None,
        max_tick: float = 30.0, concurrency: int = 4, claim_batch: int = 500,
        clock_offset: float = 0.0, clock: Clock | None = None, runner_id: str | None = None,
        liveness_poll: float = 2.0,
    ) -> None:
        names = [job.name for job in jobs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate job names: {names}")
        self.pool, self.jobs, self.dsn = pool, list(jobs), dsn
        self.max_tick, self.claim_batch = max_tick, claim_batch
        self.clock_offset = timedelta(seconds=clock_offset)
        self._clock = clock
        self.runner_id = runner_id or f"{socket.gethostname()}:{os.getpid()}"
        self.liveness = Liveness(pool, dsn, name=f"hookgate scheduler {self.runner_id}")
        self.liveness_poll = timedelta(seconds=liveness_poll)
        self.concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._inflight: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()

    # ----------------------------------------------------------------------------------- time
    async def now(self) -> datetime:
        """The scheduler's "now": the database clock (plus the test-only offset), or the injected clock."""
        if self._clock is not None:
            return await self._clock()
        async with self.pool.acquire() as conn:
            db_now: datetime = await conn.fetchval(Q.cron_clock)
        return db_now + self.clock_offset

    # ------------------------------------------------------------------------------- service
    async def run(self) -> None:
        """Tick until stopped: sleep until the next due time, or until NOTIFY hookgate_triggers."""
        listener: asyncpg.Connection | None = None
        failures = 0
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                if listener is None or listener.is_closed():  # (re)connect: a lost LISTEN only costs latency
                    listener = await self._listen()
                try:
                    report = await self.tick()
                    delay = await self._sleep_for(await self.now())
                    if not report.live:  # try to take the lock again soon: until then nothing is claimed
                        delay = min(delay, self.liveness_poll.total_seconds())
                    log.debug("tick", extra={"claimed": report.claimed, "sleep_s": delay})
                    failures = 0
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    failures += 1
                    delay = min(self.max_tick, 0.5 * 2 ** min(failures, 6))
                    log.warning("scheduler tick failed; retrying", extra={"error": str(exc), "in_s": delay})
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), delay)
        finally:
            if listener is not None:
                with contextlib.suppress(Exception):
                    await listener.close()
            if not self._inflight:  # else stop() releases the lock once they are done
                await self.liveness.close()

    async def stop(self, deadline: float = 20.0) -> None:
        """Stop claiming; let running handlers finish within ``deadline`` seconds, then cancel them."""
        self._stopping.set()
        self._wake.set()
        if self._inflight:
            _, late = await asyncio.wait(set(self._inflight), timeout=deadline)
            for task in late:
                task.cancel()
            for task in late:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        # Only now: while handlers drain, their executions must not look abandoned to other runners.
        await self.liveness.close()

    async def run_once(self, now: datetime | None = None) -> TickReport:
        """One tick at ``now`` (default: the scheduler clock), waiting for every handler it started.

        The liveness lock is released at the end unless it was already held (by ``run()`` or ``tick()``).
        """
        opened = not self.liveness.held
        try:
            report = await self.tick(now)
            while self._inflight:
                await asyncio.gather(*list(self._inflight), return_exceptions=True)
        finally:
            if opened:
                await self.liveness.close()
        return report

    async def _listen(self) -> asyncpg.Connection | None:
        if self.dsn is None:
            return None
        try:
            conn = await database.connect(self.dsn)
            await conn.add_listener(TRIGGERS_CHANNEL, lambda *_: self._wake.set())
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("cannot LISTEN; polling only", extra={"error": str(exc)})
            return None
        return conn

    async def _sleep_for(self, now: datetime) -> float:
        """Seconds until the earliest due work of any job (0 if already due), at most ``max_tick``.

        At most ``liveness_poll`` while another runner holds executions.
        """
        poll = now + self.liveness_poll
        async with self.pool.acquire() as conn:
            candidates = [await conn.fetchval(Q.cron_next_wake, [spec.name for spec in self.jobs],
                                              self.liveness.key, poll)]
            for spec in self.jobs:
                candidates.append(await self._job_next_due(conn, spec, now))
        due = [at for at in candidates if at is not None]
        if not due:
            return self.max_tick
        wait: float = (min(due) - now).total_seconds()
        return max(0.0, min(self.max_tick, wait))

    async def _job_next_due(self, conn: Conn, spec: JobSpec, now: datetime) -> datetime | None:
        if isinstance(spec.catch_up, CustomPlans):
            return await spec.catch_up.next_due(conn, now)
        assert spec.cadence is not None
        return spec.cadence.next_after(now - spec.schedule_delay) + spec.schedule_delay

    # ---------------------------------------------------------------------------------- tick
    async def tick(self, now: datetime | None = None) -> TickReport:
        """Sweep, claim and start handlers (without waiting for them); returns what was claimed.

        Claims nothing unless this runner holds its liveness lock: rows it claimed without it would look
        abandoned to every other runner.
        """
        at = now or await self.now()
        report = TickReport(at, live=await self.liveness.ensure())
        async with self.pool.acquire() as conn:
            await self._sweep(conn, at, report)
        if not report.live:
            return report
        for spec in self.jobs:
            if self._stopping.is_set():
                break
            report.claimed[spec.name] = await self._claim_job(spec, now)
        return report

    async def _sweep(self, conn: Conn, at: datetime, report: TickReport) -> None:
        """Fail the RUNNING rows whose runner is gone (at once), then those past stale_after (the fallback).

        The fallback covers a dead runner whose session lingers (PostgreSQL has not noticed yet), and two
        runners' keys colliding, which only makes a dead runner look alive.
        """
        gone = await conn.fetch(Q.cron_sweep_gone, [spec.name for spec in self.jobs],
                                [spec.stale_reentry for spec in self.jobs], at, LOCK_SPACE)
        report.gone = len(gone)
        for row in gone:
            log.warning("execution's runner is gone", extra={
                "job": row["job_name"], "scope": row["scope_id"], "plan_time": row["plan_time"].isoformat(),
                "runner": row["runner_id"]})
        for spec in self.jobs:
            rows = await conn.fetch(Q.cron_sweep_stale, spec.name, at, spec.stale_reentry)
            report.swept += len(rows)
            for row in rows:
                log.warning("execution went stale", extra={"job": spec.name, "scope": row["scope_id"],
                                                           "plan_time": row["plan_time"].isoformat()})

    async def _claim_job(self, spec: JobSpec, override: datetime | None) -> int:
        total = 0
        at = override or await self.now()
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(Q.cron_takeover, spec.name, at, self.runner_id,
                                    spec.stale_timeout.total_seconds(), spec.stale_reentry, self.claim_batch,
                                    self.liveness.key)
        fixed = override is not None
        total += self._start(spec, [JobRun.from_row(spec.name, r, at) for r in rows], fixed)
        if spec.transactional is not None:
            return total + await self._fuse_job(spec, override, at)
        while not self._stopping.is_set():
            limit = self.claim_batch
            async with self.pool.acquire() as conn, conn.transaction():
                plans = await self._plans(conn, spec, at, limit)
                rows = await self._claim(conn, spec, plans, at) if plans else []
            total += self._start(spec, [JobRun.from_row(spec.name, r, at) for r in rows], fixed)
            if len(plans) < limit or not rows or spec.cadence is not None:
                break
            at = override or await self.now()
        return total

    async def _plans(self, conn: Conn, spec: JobSpec, now: datetime, limit: int) -> list[Plan]:
        if isinstance(spec.catch_up, CustomPlans):
            return await spec.catch_up.plans(conn, now, limit)
        scopes = await spec.scopes(conn, now) if spec.scopes else ["-"]
        until = now - spec.schedule_delay
        plans: list[Plan] = []
        for row in await conn.fetch(Q.cron_scope_state, spec.name, spec.scope_kind, scopes):
            if spec.single_flight and row["in_flight"]:
                continue
            found = self._cadence_plans(spec, row["last_plan"], until)[:spec.max_plans_per_tick]
            plans += [Plan(row["scope_id"], t) for t in found]
        return plans[:limit]

    @staticmethod
    def _cadence_plans(spec: JobSpec, last: datetime | None, until: datetime) -> list[datetime]:
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

    async def _claim(self, conn: Conn, spec: JobSpec, plans: list[Plan], now: datetime) -> list[asyncpg.Record]:
        ordered = sorted(plans, key=lambda p: (p.scope_id, p.plan_time))
        return await conn.fetch(
            Q.cron_claim, spec.name, spec.scope_kind, [p.scope_id for p in ordered],
            [p.plan_time for p in ordered], spec.max_attempts, self.runner_id, now,
            spec.stale_timeout.total_seconds(), spec.single_flight, self.liveness.key,
        )

    # ------------------------------------------------------------------------ transactional
    async def _fuse_job(self, spec: JobSpec, override: datetime | None, at: datetime) -> int:
        """Plan, handle and record fresh plans of a transactional job, ``batch_size`` per transaction.

        A custom planner locks what it plans (the autopilot planner: its triggers, SKIP LOCKED), so
        ``concurrency`` workers split the due plans; a cadence job's planner locks nothing, so one worker.
        Waits for them, so that the next tick does not find their scopes still due.
        """
        count = self.concurrency if isinstance(spec.catch_up, CustomPlans) else 1
        workers = [self._fuse_worker(spec, override, at) for _ in range(count)]
        outcomes = await asyncio.gather(*workers, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return sum(o for o in outcomes if isinstance(o, int))

    async def _fuse_worker(self, spec: JobSpec, override: datetime | None, at: datetime) -> int:
        total = 0
        while not self._stopping.is_set():
            async with self._slots:
                planned, fused, rows = await self._fuse_batch(spec, at, override is not None)
            metrics.scheduler_started(spec.name, [(r.plan_time, r.now) for r in fused])
            total += len(fused) + self._start(spec, [JobRun.from_row(spec.name, r, at) for r in rows],
                                              override is not None)
            if planned < spec.batch_size or not (fused or rows):  # as _claim_job: nothing claimed, stop
                break
            at = override or await self.now()
        return total

    async def _fuse_batch(
        self, spec: JobSpec, at: datetime, fixed: bool
    ) -> tuple[int, list[JobRun], list[asyncpg.Record]]:
        """One transaction: plan up to ``batch_size``, then handle and record them, or claim them RUNNING.

        Returns how many were planned, the runs finished here, and the claim rows of an ordinary claim
        (when the transactional attempt failed: they are handed to the ordinary handler).
        """
        async with self.pool.acquire() as conn, conn.transaction():
            # A frozen holder must not keep its scopes locked (and unclaimed) for long: within run_timeout
            # its session ends, the transaction rolls back and the plans are due again, on time.
            await conn.execute(Q.cron_hold_guard, _ms(spec.run_timeout))
            plans = await self._plans(conn, spec, at, spec.batch_size)
            if not plans:
                return 0, [], []
            plans.sort(key=lambda p: (p.scope_id, p.plan_time))
            fused = await self._fuse(conn, spec, plans, at, fixed)
            if fused is not None:
                return len(plans), fused, []
            return len(plans), [], await self._claim(conn, spec, plans, at)

    async def _fuse(
        self, conn: Conn, spec: JobSpec, plans: list[Plan], at: datetime, fixed: bool
    ) -> list[JobRun] | None:
        """The transactional attempt, in a savepoint: the handler's writes and the SUCCESS rows, or nothing.

        None when it failed (the handler raised, a lock wait or statement ran too long, or another
        scheduler won a plan): everything it wrote is rolled back and the caller claims the plans.
        """
        assert spec.transactional is not None
        runs = [JobRun(0, spec.name, p.scope_id, p.plan_time, 1, spec.max_attempts, _NO_LEASE, at) for p in plans]
        batch = Batch(spec, runs, self.pool, at, clock=lambda: self._time(runs, fixed))
        try:
            async with conn.transaction():
                await conn.execute(Q.cron_fuse_limits, _ms(FUSE_LOCK_TIMEOUT), _ms(spec.run_timeout))
                await spec.transactional(conn, batch)
                rows = await conn.fetch(
                    Q.cron_claim_done, spec.name, spec.scope_kind, [r.scope_id for r in runs],
                    [r.plan_time for r in runs], spec.max_attempts, self.runner_id, at,
                    spec.stale_timeout.total_seconds(), spec.single_flight, self.liveness.key,
                    await self._time(runs, fixed),
                    [None if r.result is None else json.dumps(r.result) for r in runs])
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

    # ------------------------------------------------------------------------------ execute
    def _start(self, spec: JobSpec, runs: list[JobRun], fixed: bool) -> int:
        """Start the handlers of claimed runs in batches; ``fixed``: time is injected (run_once(now=…))."""
        metrics.scheduler_started(spec.name, [(r.plan_time, r.now) for r in runs])
        for i in range(0, len(runs), spec.batch_size):
            task = asyncio.create_task(self._execute(spec, runs[i:i + spec.batch_size], fixed))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        return len(runs)

    async def _time(self, runs: Sequence[JobRun], fixed: bool) -> datetime:
        return runs[0].now if fixed else await self.now()

    async def _execute(self, spec: JobSpec, runs: list[JobRun], fixed: bool) -> None:
        async with self._slots:
            error = await self._call(spec, runs, fixed)
        if error is not None:
            # A raising handler's transaction rolled back: nothing it marked finished was committed. Rows
            # it did commit are no longer RUNNING, so the guarded FAILED write leaves them alone.
            for run in runs:
                run.finished = False
        if error is not None and len(runs) > 1:
            # One bad scope must not fail its neighbours: retry the batch one run at a time.
            for run in runs:
                run.result, run.finished = None, False
                await self._execute(spec, [run], fixed)
            return
        try:
            await self._finish(spec, runs, error, fixed)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("terminal write failed; the lease will go stale", extra={"job": spec.name,
                                                                                "error": str(exc)})

    async def _call(self, spec: JobSpec, runs: list[JobRun], fixed: bool) -> tuple[str, str] | None:
        """Run the handler under its run timeout and heartbeats; returns (code, message) on failure."""
        batch = Batch(spec, runs, self.pool, runs[0].now, clock=lambda: self._time(runs, fixed))
        handler: asyncio.Task[None] = asyncio.ensure_future(spec.handler(batch))
        beats = asyncio.create_task(self._heartbeat(spec, runs, handler, fixed))
        try:
            async with asyncio.timeout(spec.run_timeout.total_seconds()):
                await handler
        except TimeoutError:
            return "run_timeout", f"the handler ran longer than {spec.run_timeout}"
        except asyncio.CancelledError:
            if all(r.lease_lost.is_set() for r in runs):
                return None
            handler.cancel()
            await self._finish(spec, runs, ("shutdown", "the scheduler stopped before the handler finished"), fixed)
            raise
        except LeaseLost as exc:  # a guard inside the handler's transaction: its work was rolled back
            return "lease_lost", str(exc)
        except Exception as exc:
            log.exception("handler failed", extra={"job": spec.name})
            return "handler_error", f"{exc.__class__.__name__}: {exc}"
        finally:
            beats.cancel()
        return None

    async def _heartbeat(
        self, spec: JobSpec, runs: list[JobRun], handler: asyncio.Task[None], fixed: bool
    ) -> None:
        """Extend the leases every ``heartbeat``; a run whose lease is gone is told.

        The handler is cancelled once no run of its batch is held any more.
        """
        while True:
            await asyncio.sleep(spec.heartbeat.total_seconds())
            live = [r for r in runs if not r.finished and not r.lease_lost.is_set()]
            if not live:
                return
            now = await self._time(runs, fixed)
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

    async def _finish(
        self, spec: JobSpec, runs: list[JobRun], error: tuple[str, str] | None, fixed: bool
    ) -> None:
        """Terminal writes for runs the handler did not finish itself, guarded by the lease token."""
        pending = [r for r in runs if not r.finished and not r.lease_lost.is_set()]
        if not pending:
            return
        now = await self._time(pending, fixed)
        async with self.pool.acquire() as conn:
            if error is None:
                results = [None if r.result is None else json.dumps(r.result) for r in pending]
                rows = await conn.fetch(Q.cron_succeed, *_ids_tokens(pending), results, now)
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
