"""What a scheduled job is: its cadence or planner, catch-up mode, leases, retries and handler (ARCHITECTURE §8).

Errors (under ``hookgate.errors.HookgateError``)::

    SchedulerError
    └── InvalidJobSpec   a JobSpec that cannot work (refused at construction)
    LeaseLost            the execution's lease was swept or taken over; the holder's writes are void
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import asyncpg

from hookgate.database import Conn
from hookgate.errors import HookgateError
from scheduler.clock import Clock

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SchedulerError(HookgateError):
    """Base of the scheduler's errors."""


class InvalidJobSpec(SchedulerError, ValueError):
    """A JobSpec that cannot work; the message says which field and why."""


class Cadence(Protocol):
    """When a job's plans fall: a cron ``scheduler.cron.Schedule`` or an :class:`Every` interval."""

    def next_after(self, after: datetime) -> datetime:
        """The first plan time strictly after ``after``."""

    def latest_in(self, after: datetime, until: datetime) -> datetime | None:
        """The newest plan time in ``(after, until]``."""

    def occurrences(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """The earliest ``limit`` plan times in ``(after, until]``, ascending."""


@dataclass(frozen=True)
class Every:
    """A fixed interval aligned on the Unix epoch (``Every(timedelta(seconds=60))`` plans on each minute)."""

    interval: timedelta

    def __post_init__(self) -> None:
        if self.interval <= timedelta(0):
            raise InvalidJobSpec("Every.interval must be positive")

    def _floor(self, at: datetime) -> datetime:
        return _EPOCH + ((at - _EPOCH) // self.interval) * self.interval

    def next_after(self, after: datetime) -> datetime:
        """The first interval boundary strictly after ``after``."""
        return self._floor(after) + self.interval

    def latest_in(self, after: datetime, until: datetime) -> datetime | None:
        """The newest boundary in ``(after, until]``."""
        newest = self._floor(until)
        return newest if newest > after else None

    def occurrences(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """The earliest ``limit`` boundaries in ``(after, until]``."""
        found: list[datetime] = []
        at = self.next_after(after)
        while at <= until and len(found) < limit:
            found.append(at)
            at += self.interval
        return found


@dataclass(frozen=True)
class Plan:
    """One occurrence a planner wants claimed: the scope and its plan time (UTC)."""

    scope_id: str
    plan_time: datetime


@dataclass(frozen=True)
class LatestOnly:
    """Fire only the newest due plan; with ``late_after``, drop it when it is more than that late."""

    late_after: timedelta | None = None


@dataclass(frozen=True)
class EveryPlan:
    """Fire every missed plan, oldest first, within ``window`` and at most ``max_per_tick`` per tick."""

    window: timedelta
    max_per_tick: int


@dataclass
class Scan:
    """How far one tick's planners of a job have read, shared by the tick's workers; a new tick starts afresh.

    ``after`` is the custom planner's own cursor (None: nothing read yet). A planner that resumes after it
    need not read again, batch after batch, what the tick's earlier batches read.
    """

    after: Any = None


#: A custom planner: ``(conn, now, limit, scan) -> plans`` (new plans only; due retries are generic). It runs
#: in the claiming transaction, so row locks it takes last until its plans are claimed (for a transactional
#: job: until they are handled and recorded; a single-flight transactional job's planner must lock its scopes).
Planner = Callable[[Conn, datetime, int, Scan], Awaitable[list[Plan]]]
#: When a custom planner will next have something due: ``(conn, now) -> time or None``.
NextDue = Callable[[Conn, datetime], Awaitable[datetime | None]]
#: The scopes of a cadence job (default: one global scope ``"-"``).
ScopeProvider = Callable[[Conn, datetime], Awaitable[list[str]]]


@dataclass(frozen=True)
class CustomPlans:
    """Plans-for-scope computed by the job itself (irregular cron occurrences, one scope per trigger)."""

    plans: Planner
    next_due: NextDue


CatchUp = LatestOnly | EveryPlan | CustomPlans


@dataclass(eq=False)
class JobRun:
    """One claimed execution ``(job, scope, plan_time)`` handed to a handler, with its lease."""

    id: int
    job: str
    scope_id: str
    plan_time: datetime
    attempt: int
    max_attempts: int
    lease_token: UUID
    now: datetime
    #: Set when a heartbeat or guard finds the lease gone: stop, the result will be ignored.
    lease_lost: asyncio.Event = field(default_factory=asyncio.Event)
    #: What the handler records as the execution's result (JSON object) on success.
    result: dict[str, Any] | None = None
    #: Set by :func:`scheduler.execution.succeed_in` when the handler finished it in its own transaction.
    finished: bool = False

    @classmethod
    def from_row(cls, job: str, row: asyncpg.Record, now: datetime) -> JobRun:
        """A run from a claim or takeover row."""
        return cls(row["id"], job, row["scope_id"], row["plan_time"], row["attempt"], row["max_attempts"],
                   row["lease_token"], now)


@dataclass(frozen=True)
class Claim:
    """Who claims a transactional attempt's plans, for a handler that claims them in its own statement."""

    runner_id: str
    #: The runner's liveness key (``scheduler.liveness``), written into each execution row.
    lock_key: int


@dataclass
class Batch:
    """Claimed executions of one job handed to its handler together (one, for most jobs)."""

    spec: JobSpec
    runs: list[JobRun]
    pool: asyncpg.Pool
    #: The claim time; ``clock.now()`` gives the scheduler's current time (the database clock, or injected).
    now: datetime
    clock: Clock
    #: A transactional attempt only: the planner's plans, one per run in the same order (a planner may hand
    #: its handler what it read with them), and who claims them.
    plans: Sequence[Plan] = ()
    claim: Claim | None = None


#: Called after runs were recorded FAILED (same connection), e.g. to make their scopes due again.
FailureHook = Callable[[Conn, list[JobRun], datetime], Awaitable[None]]

#: A handler gets a batch; it sets ``run.result`` per run (or finishes runs in its own transaction) and
#: returns. An exception fails every unfinished run of the batch with ``handler_error``.
Handler = Callable[[Batch], Awaitable[None]]

#: A transactional handler does all of a batch's work on ``conn``, inside the transaction that plans and
#: claims the batch, and sets ``run.result`` per run; the manager then records the executions SUCCESS in
#: that same transaction (``cron_claim_done``). Only for work that is purely writes to this database: nothing
#: outside it may happen, since the transaction can still roll back (then the plans are claimed the ordinary
#: way and handed to ``handler``). ``run.id`` is not known yet while it runs. A handler may instead claim the
#: plans itself, in the statement that does its work, through ``hookgate_cron_claim_done`` (the same rule,
#: with ``batch.claim``), and return the claim rows (``id, scope_id, plan_time, lease_token``); None: the
#: manager claims them.
TransactionalHandler = Callable[[Conn, Batch], Awaitable[list[asyncpg.Record] | None]]


def _positive(name: str, value: timedelta) -> None:
    if value <= timedelta(0):
        raise InvalidJobSpec(f"{name} must be positive")


@dataclass(frozen=True)
class JobSpec:
    """A job: a stable name, when it plans, how it catches up, its lease and retry rules, its handler.

    ``run_timeout`` and ``heartbeat`` must be shorter than ``stale_timeout``, or a healthy holder would
    be declared stale and robbed by another scheduler.
    """

    name: str
    handler: Handler
    cadence: Cadence | None = None
    catch_up: CatchUp = field(default_factory=LatestOnly)
    scope_kind: str = "global"
    scopes: ScopeProvider | None = None
    schedule_delay: timedelta = timedelta(0)
    max_plans_per_tick: int = 100
    run_timeout: timedelta = timedelta(minutes=2)
    stale_timeout: timedelta = timedelta(minutes=5)
    heartbeat: timedelta = timedelta(seconds=30)
    stale_reentry: bool = True
    max_attempts: int = 3
    retry_backoff: Sequence[timedelta] = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15))
    retry_jitter: float = 0.1
    single_flight: bool = False
    batch_size: int = 1
    on_failure: FailureHook | None = None
    #: Opt-in: fresh plans are claimed, handled and recorded SUCCESS in one transaction by this handler
    #: (``docs/SCHEDULER.md``, "Transactional jobs"); retries, takeovers and failures use ``handler``.
    transactional: TransactionalHandler | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise InvalidJobSpec("name must be a non-empty snake_case identifier")
        for name in ("run_timeout", "stale_timeout", "heartbeat"):
            _positive(name, getattr(self, name))
        if self.run_timeout >= self.stale_timeout:
            raise InvalidJobSpec("run_timeout must be shorter than stale_timeout")
        if self.heartbeat >= self.stale_timeout:
            raise InvalidJobSpec("heartbeat must be shorter than stale_timeout")
        if self.schedule_delay < timedelta(0):
            raise InvalidJobSpec("schedule_delay must not be negative")
        self._check_counts()
        self._check_catch_up()

    def _check_counts(self) -> None:
        if self.max_attempts < 1:
            raise InvalidJobSpec("max_attempts must be at least 1")
        if self.max_attempts > 1 and not self.retry_backoff:
            raise InvalidJobSpec("retry_backoff must name at least one delay when retries are allowed")
        if any(delay < timedelta(0) for delay in self.retry_backoff):
            raise InvalidJobSpec("retry_backoff delays must not be negative")
        if not 0 <= self.retry_jitter <= 1:
            raise InvalidJobSpec("retry_jitter must be between 0 and 1")
        if self.max_plans_per_tick < 1 or self.batch_size < 1:
            raise InvalidJobSpec("max_plans_per_tick and batch_size must be at least 1")

    def _check_catch_up(self) -> None:
        if self.transactional is not None and self.single_flight and not isinstance(self.catch_up, CustomPlans):
            # Nothing locks a cadence job's scope while its plan is handled, so two transactional attempts of
            # one scope (an occurrence and the next) could overlap before either commits.
            raise InvalidJobSpec("a transactional single-flight job needs a custom planner that locks its scopes")
        if isinstance(self.catch_up, CustomPlans):
            if self.cadence is not None or self.scopes is not None:
                raise InvalidJobSpec("a custom planner replaces cadence and scopes; give neither")
            return
        if self.cadence is None:
            raise InvalidJobSpec("a cadence is required unless catch_up is CustomPlans")
        if isinstance(self.catch_up, LatestOnly) and self.catch_up.late_after is not None:
            _positive("late_after", self.catch_up.late_after)
        if isinstance(self.catch_up, EveryPlan):
            _positive("EveryPlan.window", self.catch_up.window)
            if self.catch_up.max_per_tick < 1:
                raise InvalidJobSpec("EveryPlan.max_per_tick must be at least 1")

    def retry_at(self, attempt: int, now: datetime, rng: random.Random | None = None) -> datetime | None:
        """When failed attempt ``attempt`` is retried (backoff plus up to ``retry_jitter`` of it), or None."""
        if attempt >= self.max_attempts:
            return None
        delay = self.retry_backoff[min(attempt, len(self.retry_backoff)) - 1]
        spread = (rng or random).uniform(0, self.retry_jitter)
        return now + delay * (1 + spread)
