"""``HOOKGATE_WORKSPACE_MAX_QUEUED``: which workspaces have too many waiting runs, known without a query per request.

A workspace whose waiting runs (``pending``, ``issue_created`` or ``queued``: admitted, not yet running, not
finished) reach the limit gets its webhooks refused with 429 and ``Retry-After`` (see
:mod:`gateway.ingress.decision`). Counting runs per request would cost the hot path a query each; instead each
gateway keeps the set of workspaces at the limit, read by one query (``workspaces_queue_full``, a loose index
scan that reads at most the limit per workspace) when the set is older than ``refresh_s``. The check is then a
set lookup; the request that finds the set stale waits for that one query, and concurrent ones share it.

So the limit is soft: a workspace may pass it by what its webhooks bring in during one refresh interval, on each
gateway, and a workspace that drained below it is accepted again within about one interval. If the query fails,
the last set is kept (an outage fails the write that follows anyway) and the next request tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from uuid import UUID

import asyncpg

from hookgate import database
from sql import Q

log = logging.getLogger("hookgate.ingress")

_READ_ERRORS: tuple[type[Exception], ...] = (*database.DATABASE_ERRORS, TimeoutError)

#: Seconds a gateway trusts its set of full workspaces before reading it again.
REFRESH_S = 1.0


class WorkspaceQueues:
    """The workspaces at ``limit`` waiting runs, as of at most ``refresh_s`` ago (``limit`` 0: no limit)."""

    def __init__(self, pool: asyncpg.Pool, limit: int, acquire_timeout: float, *, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pool, self.limit, self.acquire_timeout, self.refresh_s = pool, limit, acquire_timeout, refresh_s
        self._clock = clock
        self._full: frozenset[UUID] = frozenset()
        self._read_at = float("-inf")
        self._reading: asyncio.Future[None] | None = None

    async def full(self, workspace_id: UUID) -> bool:
        """True when the workspace has ``limit`` waiting runs or more (as of the last read)."""
        if not self.limit:
            return False
        if self._clock() - self._read_at >= self.refresh_s:
            await self.refresh()
        return workspace_id in self._full

    async def refresh(self) -> None:
        """Read the set again; concurrent callers share one query."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read())
        reading = self._reading
        try:
            await asyncio.shield(reading)
        finally:
            if self._reading is reading and reading.done():
                self._reading = None

    async def _read(self) -> None:
        try:
            async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                rows = await conn.fetch(Q.workspaces_queue_full, self.limit)
        except _READ_ERRORS as exc:
            log.warning("could not read the workspaces at their queue limit; keeping the last list",
                        extra={"error": exc.__class__.__name__})
        else:
            self._full = frozenset(r["workspace_id"] for r in rows)
        self._read_at = self._clock()
