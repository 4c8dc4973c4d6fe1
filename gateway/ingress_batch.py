"""Group commit for ingress steps 7-10: concurrent deliveries share one statement and one commit.

A verified request's write joins a queue; at most ``inflight`` batches are in the database at once, and
each takes every write that queued up while the others were there (at most ``size``). At low load a batch
is one request and waits for nothing; under load one round trip and one commit serve many requests.
That is what bounded the gateway: per request, a statement cost it a socket write and asyncpg's
protocol work, and PostgreSQL a commit (docs/BENCHMARKS.md). Each request is still answered only after
the commit of its own batch. A batch that fails for any reason other than an unavailable database is
written again request by request (the same statement, one-element arrays), so one bad row cannot fail
its neighbours and its own error reaches its own caller.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from hookgate import database, metrics
from hookgate.database import Conn
from sql import Q

#: One request's elements of ``delivery_ingest``'s parameter arrays, in the statement's order.
Params = tuple[Any, ...]
_Pending = tuple[Params, "asyncio.Future[asyncpg.Record]"]


class IngestBatcher:
    """Writes ingress deliveries in batches over ``pool`` (see the module docstring)."""

    def __init__(self, pool: asyncpg.Pool, acquire_timeout: float, *, size: int = 64, inflight: int = 4) -> None:
        self.pool, self.acquire_timeout, self.size, self.inflight = pool, acquire_timeout, size, inflight
        self._queue: deque[_Pending] = deque()
        self._writers: set[asyncio.Task[None]] = set()  # references, so a running writer is never collected
        self._running = 0

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection for the rare statements outside a batch (the duplicate path)."""
        async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
            yield conn

    async def ingest(self, params: Params) -> asyncpg.Record:
        """Write one request in the next batch; its row of ``delivery_ingest`` once the batch committed."""
        done: asyncio.Future[asyncpg.Record] = asyncio.get_running_loop().create_future()
        self._queue.append((params, done))
        if self._running < self.inflight:
            self._running += 1
            writer = asyncio.create_task(self._write_while_queued())
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        return await done

    def _take(self) -> list[_Pending]:
        batch: list[_Pending] = []
        while self._queue and len(batch) < self.size:
            batch.append(self._queue.popleft())
        return batch

    async def _write_while_queued(self) -> None:
        try:
            while self._queue:
                batch: list[_Pending] = []
                try:
                    async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                        batch = self._take()  # taken once connected: what queued meanwhile joins too
                        await self._write(conn, batch)
                except Exception as exc:  # no connection (or it broke on release): these requests get a 503
                    for _, done in batch or self._take():
                        if not done.done():
                            done.set_exception(exc)
        finally:
            # Counted down in the same step as the empty-queue check, never in a done-callback: a callback
            # runs a loop turn later, and a write queued in between would find no free writer and no writer
            # left to take it (seen: a gateway with 64 requests queued and idle).
            self._running -= 1

    async def _write(self, conn: Conn, batch: Sequence[_Pending]) -> None:
        metrics.INGEST_BATCH.observe(len(batch))
        if len(batch) > 1:
            try:
                rows = await _ingest(conn, [params for params, _ in batch])
            except Exception as exc:
                if database.is_unavailable(exc):
                    raise
            else:
                for row, (_, done) in zip(rows, batch, strict=True):
                    if not done.done():
                        done.set_result(row)
                return
        for params, done in batch:  # alone, or again one by one after the batch failed
            try:
                [row] = await _ingest(conn, [params])
            except Exception as exc:
                if not done.done():
                    done.set_exception(exc)
                if database.is_unavailable(exc):
                    raise
                continue
            if not done.done():
                done.set_result(row)


async def _ingest(conn: Conn, requests: Sequence[Params]) -> list[asyncpg.Record]:
    """``delivery_ingest`` over requests' parameters, transposed into its parallel arrays."""
    return await conn.fetch(Q.delivery_ingest, *(list(column) for column in zip(*requests, strict=True)))
