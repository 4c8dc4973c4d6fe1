"""The scheduler service: every replica ticks, PostgreSQL decides who runs each occurrence (ARCHITECTURE §8).

A tick, on the scheduler's clock (the database clock unless a test injects one): make sure this runner holds
its liveness lock (``scheduler.liveness``; without it, it claims nothing); fail abandoned RUNNING rows, take
over due retries and claim new plans (``scheduler.claims``, or ``scheduler.transactional`` for a job that
handles its fresh plans in the claiming transaction); run the handlers with heartbeats and guarded terminal
writes (``scheduler.execution``). Between ticks it sleeps until the next due time (bounded by ``max_tick``,
and by ``liveness_poll`` while another runner holds executions) and wakes early on NOTIFY ``hookgate_triggers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import asyncpg

from hookgate import database, notify
from hookgate.database import Conn
from hookgate.notify import NotifyListener
from scheduler import transactional
from scheduler.claims import Claimer, planned_afresh, sweep_abandoned
from scheduler.clock import Clock, DatabaseClock, FixedClock
from scheduler.execution import Executor
from scheduler.liveness import Liveness
from scheduler.spec import CustomPlans, JobSpec
from sql import Q

log = logging.getLogger("hookgate.scheduler")

#: Longest pause between two failed ticks (the database out of reach): a scheduler is back at work at most
#: this long after the database (a promoted standby, after a failover) accepts connections again.
FAILED_TICK_RETRY_MAX_S = 2.0
#: Pause after a tick that claimed nothing although something is due: what is due is then held by another
#: scheduler's batches in flight (locked, not yet committed), so ticking again at once would only spin, sweeping
#: and reading locked rows until they commit; if they roll back instead, they are claimed this much later.
BUSY_DUE_PAUSE_S = 0.2


@dataclass(frozen=True)
class SchedulerConfig:
    """How a scheduler runs; the defaults are the settings' defaults.

    ``dsn``: direct connections for the liveness lock and LISTEN (without it, the lock is held on a pooled
    connection and the service only polls). ``liveness_poll``: while another runner holds RUNNING
    executions, look again at least this often (s), so that if it dies they are retried within seconds.
    ``clock``: the scheduler's "now" (default: the database clock).
    """

    dsn: str | None = None
    max_tick: float = 30.0
    concurrency: int = 4
    claim_batch: int = 500
    liveness_poll: float = 2.0
    runner_id: str | None = None
    clock: Clock | None = None

    def __post_init__(self) -> None:
        if self.max_tick <= 0 or self.liveness_poll <= 0:
            raise ValueError("max_tick and liveness_poll must be positive")
        if self.concurrency < 1 or self.claim_batch < 1:
            raise ValueError("concurrency and claim_batch must be at least 1")


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


class Scheduler:
    """The DB-backed scheduler service: ``run()`` until ``stop()``, or ``run_once()`` in tests."""

    name = "scheduler"

    def __init__(self, pool: asyncpg.Pool, jobs: Sequence[JobSpec], config: SchedulerConfig | None = None) -> None:
        names = [job.name for job in jobs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate job names: {names}")
        self.config = config = config or SchedulerConfig()
        self.pool, self.jobs, self.dsn = pool, list(jobs), config.dsn
        self.max_tick = config.max_tick
        self.clock: Clock = config.clock or DatabaseClock(pool)
        self.runner_id = config.runner_id or f"{socket.gethostname()}:{os.getpid()}"
        self.liveness = Liveness(pool, config.dsn, name=f"hookgate scheduler {self.runner_id}")
        self.liveness_poll = timedelta(seconds=config.liveness_poll)
        self.executor = Executor(pool, config.concurrency)
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()

    async def now(self) -> datetime:
        """The scheduler's "now": its clock (the database clock unless one was injected)."""
        return await self.clock.now()

    # ------------------------------------------------------------------------------- service
    async def run(self) -> None:
        """Tick until stopped: sleep until the next due time, or until NOTIFY hookgate_triggers."""
        listener = self._listener()
        failures = 0
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                if listener is not None:  # (re)connect: a lost LISTEN only costs latency
                    await listener.ensure()
                try:
                    report = await self.tick()
                    delay = await self._sleep_for(await self.now())
                    if not report.live:  # try to take the lock again soon: until then nothing is claimed
                        delay = min(delay, self.liveness_poll.total_seconds())
                    elif delay == 0 and not any(report.claimed.values()):
                        delay = min(BUSY_DUE_PAUSE_S, self.max_tick)
                    log.debug("tick", extra={"claimed": report.claimed, "sleep_s": delay})
                    failures = 0
                except database.DATABASE_ERRORS as exc:
                    failures += 1
                    delay = min(self.max_tick, FAILED_TICK_RETRY_MAX_S, 0.5 * 2 ** min(failures, 6))
                    log.warning("scheduler tick failed; retrying", extra={"error": str(exc), "in_s": delay})
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), delay)
        finally:
            if listener is not None:
                await listener.close()
            if not self.executor.inflight:  # else stop() releases the lock once they are done
                await self.liveness.close()

    async def stop(self, deadline: float = 20.0) -> None:
        """Stop claiming; let running handlers finish within ``deadline`` seconds, then cancel them."""
        self._stopping.set()
        self._wake.set()
        await self.executor.stop(deadline)
        # Only now: while handlers drain, their executions must not look abandoned to other runners.
        await self.liveness.close()

    async def run_once(self, now: datetime | None = None) -> TickReport:
        """One tick at ``now`` (default: the scheduler clock), waiting for every handler it started.

        The liveness lock is released at the end unless it was already held (by ``run()`` or ``tick()``).
        """
        opened = not self.liveness.held
        try:
            report = await self.tick(now)
            await self.executor.drain()
        finally:
            if opened:
                await self.liveness.close()
        return report

    def _listener(self) -> NotifyListener | None:
        """Wakes the tick loop on a trigger change; without a ``dsn`` the service only polls."""
        if self.dsn is None:
            return None
        listener = NotifyListener(self.dsn, (notify.TRIGGERS,))
        listener.subscribe(notify.TRIGGERS, lambda _payload: self._wake.set())
        return listener

    # --------------------------------------------------------------------------------- sleep
    async def _sleep_for(self, now: datetime) -> float:
        """Seconds until the earliest due work of any job (0 if already due), at most ``max_tick``.

        At most ``liveness_poll`` while another runner holds executions.
        """
        poll = now + self.liveness_poll
        async with planned_afresh(self.pool) as conn:
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

        With ``now``, the tick and the handlers it starts run on a clock fixed at ``now``. Claims nothing
        unless this runner holds its liveness lock: rows it claimed without it would look abandoned to
        every other runner.
        """
        clock = self.clock if now is None else FixedClock(now)
        at = await clock.now()
        report = TickReport(at, live=await self.liveness.ensure())
        async with planned_afresh(self.pool) as conn:
            report.gone, report.swept = await sweep_abandoned(conn, self.jobs, at)
        if not report.live:
            return report
        claimer = Claimer(self.pool, self.runner_id, self.liveness.key, clock, self.executor, self._stopping,
                          self.config.claim_batch)
        for spec in self.jobs:
            if self._stopping.is_set():
                break
            report.claimed[spec.name] = await self._claim_job(claimer, spec)
        return report

    async def _claim_job(self, claimer: Claimer, spec: JobSpec) -> int:
        """Take over the job's due retries, then claim its fresh plans (in transactions if it opted in)."""
        at = await claimer.clock.now()
        total = await claimer.take_over(spec, at)
        if spec.transactional is not None:
            return total + await transactional.claim_fresh_in_transactions(claimer, spec, at, self.config.concurrency)
        return total + await claimer.claim_fresh(spec, at)
