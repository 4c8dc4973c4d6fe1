"""``partitions`` (hourly): time partitions made ahead, and those past retention dropped whole.

``webhook_delivery`` (a day per partition), ``task_attempt`` (a week) and ``audit_log`` (a month) are
partitioned by time (docs/SCALING.md, "Partitions"). Each run creates the partitions due ahead (7 days, 2 weeks,
2 months: an insert never lacks one while this job runs at least weekly; a process that migrates at start makes
them too) and drops the partitions wholly past retention: deliveries after ``HOOKGATE_DELIVERY_RETENTION_DAYS``
(a partition that still holds a queued delivery is kept), attempts after ``HOOKGATE_RETENTION_AGE_DAYS``, the
audit log after ``HOOKGATE_AUDIT_RETENTION_DAYS`` (0: kept forever). A drop is ``DETACH PARTITION ...
CONCURRENTLY`` then ``DROP TABLE``: no row is deleted, nothing is left for vacuum, and no lock that traffic
conflicts with is taken on the table (SHARE UPDATE EXCLUSIVE; the dropped table is no longer a partition then).
Every partition change gives up after a ``lock_timeout`` and the next run tries again (a detach interrupted
half-way is finalized then).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import asyncpg

from hookgate import database
from hookgate.database import Conn
from scheduler.maintenance.periodic import periodic_spec
from scheduler.spec import Batch, JobSpec
from sql import Q

NAME = "partitions"
EVERY = timedelta(hours=1)
#: How long creating partitions waits for a lock before it gives up until the next run.
LOCK_TIMEOUT = "100ms"
#: How long a detach waits. DETACH ... CONCURRENTLY holds only SHARE UPDATE EXCLUSIVE locks, which no insert,
#: update or read conflicts with, so its wait makes no traffic queue; it waits for the transactions that were
#: using the table when it began (an ingest lasts milliseconds under load; a long report may outlast this).
DETACH_LOCK_TIMEOUT = "5s"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retention:
    """How long each partitioned table keeps its rows; ``None`` keeps them forever."""

    deliveries: timedelta | None = None
    attempts: timedelta | None = None
    audit: timedelta | None = None


@dataclass
class Outcome:
    """What one run did: partitions created, dropped, and those whose drop gave up on a lock."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    keys_released: int = 0


async def create_ahead(conn: Conn, now: datetime | None = None) -> list[str]:
    """Create the partitions due ahead of ``now`` (the database's clock when None); their names."""
    async with conn.transaction():
        await conn.execute(Q.partition_lock_timeout, LOCK_TIMEOUT, True)
        return [row["name"] for row in await conn.fetch(Q.partition_ensure, now)]


async def _detach_and_drop(conn: Conn, detach: str, drop: str) -> None:
    """Run a partition's detach (outside any transaction) and drop statements under the short lock timeout."""
    await conn.execute(Q.partition_lock_timeout, DETACH_LOCK_TIMEOUT, False)
    try:
        await conn.execute(detach)
        await conn.execute(drop)
    finally:
        await conn.execute(Q.partition_lock_timeout, None, False)


async def drop_expired(conn: Conn, now: datetime, keep: Retention, outcome: Outcome | None = None) -> Outcome:
    """Detach and drop every partition wholly past retention at ``now``; a partition whose lock is busy waits."""
    outcome = outcome or Outcome()
    # PostgreSQL lets one partition per table be pending detach: after a deferred one, the table waits.
    blocked: set[str] = set()
    expired = await conn.fetch(Q.partition_expired, now, keep.deliveries, keep.attempts, keep.audit)
    for row in expired:
        if row["parent"] in blocked:
            outcome.deferred.append(row["partition_name"])
            continue
        if row["parent"] == "webhook_delivery":
            # Keys first: a key whose delivery is gone would send its provider's retries to a duplicate path
            # that finds nothing. Released, a retry past retention is a new delivery.
            outcome.keys_released += await conn.fetchval(Q.partition_dedupe_release, row["lower_id"], row["upper_id"])
        try:
            await _detach_and_drop(conn, row["detach_sql"], row["drop_sql"])
        except asyncpg.LockNotAvailableError:
            log.warning("partition drop deferred: its lock is busy", extra={"partition": row["partition_name"]})
            outcome.deferred.append(row["partition_name"])
            blocked.add(row["parent"])
            continue
        outcome.dropped.append(row["partition_name"])
    return outcome


async def maintain(conn: Conn, now: datetime, keep: Retention) -> Outcome:
    """One run: create ahead, then drop what retention no longer keeps."""
    outcome = Outcome()
    try:
        outcome.created = await create_ahead(conn, now)
    except asyncpg.LockNotAvailableError:
        log.warning("partitions not created ahead this time: a lock was busy")
    return await drop_expired(conn, now, keep, outcome)


def _days(days: float) -> timedelta | None:
    return timedelta(days=days) if days > 0 else None


def retention_of(delivery_days: float, attempt_days: float, audit_days: float) -> Retention:
    """The retention of the settings' day counts (0 days: keep forever)."""
    return Retention(_days(delivery_days), _days(attempt_days), _days(audit_days))


def partitions_job(keep: Retention, every: timedelta = EVERY, direct_dsn: str | None = None) -> JobSpec:
    """The job: once per ``every`` across all schedulers; its result names what it created and dropped.

    ``direct_dsn``: a URL that gives a real session (HOOKGATE_DIRECT_DATABASE_URL). A detach sets its lock timeout
    for the session (``DETACH ... CONCURRENTLY`` cannot run in a transaction), which a transaction-mode pooler
    would apply to whichever server connection the next statement gets; without one, the pool's sessions are real.
    """

    @contextlib.asynccontextmanager
    async def session(batch: Batch) -> AsyncIterator[Conn]:
        if direct_dsn is None:
            async with batch.pool.acquire() as pooled:
                yield pooled
            return
        direct = await database.connect(direct_dsn)
        try:
            yield direct
        finally:
            await direct.close()

    async def handler(batch: Batch) -> None:
        for run in batch.runs:
            async with session(batch) as conn:
                outcome = await maintain(conn, run.now, keep)
            run.result = {"created": outcome.created, "dropped": outcome.dropped, "deferred": outcome.deferred,
                          "dedupe_keys_released": outcome.keys_released}

    return periodic_spec(NAME, every, handler)
