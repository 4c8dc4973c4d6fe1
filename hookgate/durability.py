"""What a 2xx survives: the durability a process runs with, read from the server and logged once at start.

Hookgate answers 2xx once the commit is acknowledged, and PostgreSQL acknowledges it according to
``synchronous_commit`` and ``synchronous_standby_names``: on the primary's disk only (no synchronous
standby), on a synchronous standby's disk too (names set, ``synchronous_commit`` ``on`` or
``remote_apply``), only in a standby's memory (``remote_write``), or not even on the primary's disk
(``off``: a crash loses the last acknowledged commits). Only a synchronous standby keeps "2xx means
durable" across the loss of the primary (docs/SCALING.md, "Failover"). Each process logs one line at
start, ``durability: …``, with the settings as fields; a weaker setting than one server's disk, or
synchronous standbys named but none attached (every commit then waits), is logged as a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import asyncpg

from hookgate import database
from hookgate.database import Conn
from sql import Q

log = logging.getLogger("hookgate.durability")


@dataclass(frozen=True)
class Durability:
    """The settings that decide what an acknowledged commit survives, as one session of a process sees them."""

    synchronous_commit: str
    standby_names: str
    in_recovery: bool = False
    sync_standbys: tuple[str, ...] = ()  # attached now in sync or quorum state
    hidden: int = 0  # attached standbys whose state this role may not see

    @property
    def synchronous(self) -> bool:
        """Whether a commit is acknowledged only once a synchronous standby has it (on its disk or in memory)."""
        return bool(self.standby_names.strip()) and self.synchronous_commit in ("on", "remote_apply", "remote_write")

    def describe(self) -> tuple[int, str]:
        """The log level and the one-line summary, ``durability: …``."""
        if self.in_recovery:
            return logging.WARNING, "durability: none, the server is a standby (read-only)"
        if self.synchronous_commit == "off":
            return logging.WARNING, ("durability: none past the last WAL flush (synchronous_commit=off): a crash "
                                     "can lose commits already answered 2xx")
        if not self.synchronous:
            return logging.INFO, "durability: one server's disk (a failover can lose commits answered 2xx)"
        where = "memory" if self.synchronous_commit == "remote_write" else "disk"
        names = self.standby_names.strip()
        line = f"durability: synchronous standby ({names}), on the primary's disk and a standby's {where}"
        if self.sync_standbys:
            return logging.INFO, f"{line}; in sync now: {', '.join(self.sync_standbys)}"
        if self.hidden:
            return logging.INFO, f"{line}; the standbys' state is not visible to this role (pg_read_all_stats)"
        return logging.WARNING, f"{line}; no synchronous standby attached: every commit waits until one is"


async def read(conn: Conn) -> Durability:
    """The durability this connection's commits get."""
    row = database.one(await conn.fetchrow(Q.server_durability))
    return Durability(row["synchronous_commit"], row["standby_names"], row["in_recovery"],
                      tuple(row["sync_standbys"]), row["hidden"])


async def log_at_start(pool: asyncpg.Pool) -> None:
    """Log once which durability this process runs with; a database error is logged, never fatal."""
    try:
        async with pool.acquire() as conn:
            found = await read(conn)
    except database.DATABASE_ERRORS as exc:
        log.warning("durability: unknown (could not be read)", extra={"error": exc.__class__.__name__})
        return
    level, line = found.describe()
    log.log(level, line, extra={"synchronous_commit": found.synchronous_commit,
                                "synchronous_standby_names": found.standby_names,
                                "sync_standbys": list(found.sync_standbys)})
