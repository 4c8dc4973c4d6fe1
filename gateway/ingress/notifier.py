"""Step 11: wake the delivery worker (NOTIFY ``hookgate_deliveries``) right after a delivery commits.

Why not NOTIFY inside the delivery's transaction: PostgreSQL serialises every committing transaction
that issued a NOTIFY on one database-wide lock held across its WAL flush, so group commit stops working
and the ingress throughput halved in ``bench/ingress.py``. The notification is a hint only (workers
poll the queue index every second), so it is sent after the commit instead (except for a request written
alone, whose own commit carries it: :mod:`gateway.ingress.batch`), coalesced per process: the
first queued delivery after a quiet spell is announced at once, later ones at most once per
``interval`` (1 ms), the payload naming every delivery since the last one (``notify.name_deliveries``: up to
64 ids, past that "look at the queue"), so that a worker can take exactly those by key. The window is short
on purpose: at a steady 200 req/s deliveries come 5 ms apart, and a 5 ms window held back about half of
their wake-ups, which was most of the POST -> agent p50 in ``bench/dispatch.py`` (6-8 ms with it, 3.3-4.0 ms
without). Under load a batch commits many deliveries at once and they share one notification, so the rate
stays bounded (at most one per millisecond, one in flight). A hint lost to a crash in that instant costs poll latency,
never a delivery.
"""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from hookgate import database, notify
from sql import Q

log = logging.getLogger("hookgate.ingress")

CHANNEL = notify.DELIVERIES
INTERVAL_S = 0.001


class DeliveryNotifier:
    """Coalescing sender of ``hookgate_deliveries`` notifications over a pool."""

    def __init__(self, pool: asyncpg.Pool, acquire_timeout: float, interval: float = INTERVAL_S) -> None:
        self.pool, self.acquire_timeout, self.interval = pool, acquire_timeout, interval
        self._pending: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._last = 0.0
        self.sent = 0

    def announce(self, delivery_id: str) -> None:
        """Announce a queued delivery (soon, coalesced with others)."""
        if len(self._pending) <= notify.NAMED_MAX:  # one more than can be named: the payload says "look" then
            self._pending.append(delivery_id)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush())

    async def settled(self) -> None:
        """Wait until every announcement so far has been sent (a listener may hear one before ``sent`` counts it)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _flush(self) -> None:
        delay = self._last + self.interval - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        while self._pending:
            named, self._pending = self._pending, []
            await self._send(notify.name_deliveries(named))
            self._last = time.monotonic()
            if self._pending:
                await asyncio.sleep(self.interval)

    async def _send(self, payload: str) -> None:
        try:
            async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                await conn.execute(Q.notify_send, CHANNEL, payload)
                self.sent += 1
        except database.DATABASE_ERRORS as exc:
            # Only a hint: the worker's poll finds the delivery anyway.
            log.warning("delivery wake-up not sent", extra={"error": exc.__class__.__name__})
