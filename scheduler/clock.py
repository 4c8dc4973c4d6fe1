"""The scheduler's clock: the database clock in service, a fixed or moved one in tests.

Every time decision of the scheduler reads :meth:`Clock.now`, never the host's clock. ``run_once(now=…)`` runs
a tick, and the handlers it starts, on a :class:`FixedClock` at that instant.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

import asyncpg

from sql import Q


class Clock(Protocol):
    """What the scheduler asks for "now" (timezone-aware UTC)."""

    async def now(self) -> datetime:
        """The current instant."""


class DatabaseClock:
    """PostgreSQL's ``clock_timestamp()``, plus ``offset`` (test-only: ``HOOKGATE_SCHEDULER_CLOCK_OFFSET_S``)."""

    def __init__(self, pool: asyncpg.Pool, offset: timedelta = timedelta(0)) -> None:
        self.pool, self.offset = pool, offset

    async def now(self) -> datetime:
        """The database clock plus the offset."""
        async with self.pool.acquire() as conn:
            at: datetime = await conn.fetchval(Q.cron_clock)
        return at + self.offset


class FixedClock:
    """A clock that always says ``at``."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    async def now(self) -> datetime:
        """The instant the clock was set to."""
        return self.at
