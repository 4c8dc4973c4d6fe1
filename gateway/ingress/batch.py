"""Group commit for ingress steps 7-10: concurrent deliveries share one statement and one commit.

A verified request's write joins a queue; at most ``inflight`` batches are in the database at once, and
each takes every write that queued up while the others were there (at most ``size``). At low load a batch
is one request and waits for nothing; under load one round trip and one commit serve many requests.
That is what bounded the gateway: per request, a statement cost it a socket write and asyncpg's
protocol work, and PostgreSQL a commit (docs/BENCHMARKS.md). Each request is still answered only after
the commit of its own batch. A batch that fails for any reason other than an unavailable database is
written again request by request (the same statement, one-element arrays), so one bad row cannot fail
its neighbours and its own error reaches its own caller.

A request written alone, with no other batch in flight, also wakes the workers in its own commit
(``delivery_ingest``'s ``$27``): the wake-up then costs no round trip of its own, and with nothing else
committing, the NOTIFY's commit lock holds nobody up. A batch of several leaves it to the notifier.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import TYPE_CHECKING, Any
from uuid import UUID

import asyncpg
from asyncpg.pgproto.pgproto import UUID as _FastUUID

from gateway.envelope import envelope_text
from hookgate import database, jsontext, metrics, notify
from hookgate.database import Conn
from sql import Q

if TYPE_CHECKING:
    from gateway.ingress.decision import Plan, Received
    from gateway.ingress.triggers import Trigger

# SQLSTATE classes that mean "the database is not there" rather than "this statement is wrong".


@dataclass(slots=True)
class IngestRow:
    """One request's write: its trigger, plan and the fields that repeat, then its own fields.

    The trigger's and plan's fields and the four that repeat are ``delivery_ingest``'s ``$1..$18``, sent once per
    distinct set of them in a batch; the request's own fields are ``$20..$26``, in order.
    """

    trigger: Trigger
    plan: Plan
    content_type: str | None
    event: str
    dedupe_source: str | None
    signature: str
    received_us: int
    """``received_at`` in microseconds since the Unix epoch: asyncpg encodes a datetime in Python, an int in C."""
    raw: bytes
    headers: str
    """The selected headers as JSON text (a jsonb parameter is encoded by a Python codec per element)."""
    envelope: str
    """As JSON text (:func:`gateway.envelope.envelope_text`): the body's own text is its payload when it can be."""
    dedupe_key: str | None
    delivery_id: UUID
    run_id: UUID | None

    @classmethod
    def of(cls, trigger: Trigger, r: Received, p: Plan) -> IngestRow:
        """The row of a decided request, with new UUIDv7 ids by the database clock (so ids sort like received_at)."""
        us = (r.received_at - _EPOCH) // _MICROSECOND
        rand = int.from_bytes(os.urandom(20), "big")  # both ids' random bits in one system call
        ms = us // 1000
        return cls(trigger, p, r.content_type, r.event, r.dedupe_source, r.signature, us, r.raw, _ENCODE(r.headers),
                   envelope_text(r.envelope, r.payload_text), r.dedupe_key, _uuid7(ms, rand),
                   None if p.run_status is None else _uuid7(ms, rand >> 80))

    @staticmethod
    def arguments(rows: Sequence[IngestRow]) -> list[list[Any]]:
        """``delivery_ingest``'s arguments for ``rows``: one array per field, in ``$n`` order.

        Rows that share a plan object (:func:`gateway.ingress.decision.admitted` hands one per trigger lookup) and
        the four repeating fields share their elements of ``$1..$18``; the set's position is each row's ``$19``.
        """
        sets: dict[tuple[Any, ...], int] = {}
        fixed: list[tuple[Any, ...]] = []
        positions = []
        for row in rows:
            # Every plan of the batch is alive, so no id is reused.
            key = (id(row.plan), row.content_type, row.event, row.dedupe_source, row.signature)
            position = sets.get(key)
            if position is None:
                position = sets[key] = len(sets) + 1
                t, p = row.trigger, row.plan
                fixed.append((t.id, t.digest, t.fingerprint, t.provider, p.status, p.reason_code, p.response_status,
                              p.response, p.run_status, p.rule_version_id, p.accountable_id, p.run_reason_code,
                              p.run_reason, p.reason, *key[1:]))
            positions.append(position)
        return [*map(list, zip(*fixed, strict=True)), positions,
                *map(list, zip(*map(_OWN_FIELDS, rows), strict=True))]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_ENCODE = jsontext.compact_encoder(allow_nan=True)  # as the pool's jsonb codec encodes (hookgate/database.py)
_OWN_FIELDS = attrgetter(*[f.name for f in fields(IngestRow)][6:])
_Pending = tuple[IngestRow, "asyncio.Future[asyncpg.Record]"]


def uuid7(unix_s: float) -> UUID:
    """A UUIDv7 (48-bit millisecond time, version 7, RFC 4122 variant, random rest), like hookgate_uuid7()."""
    return _uuid7(int(unix_s * 1000), int.from_bytes(os.urandom(10), "big"))


def _uuid7(ms: int, rand: int) -> UUID:
    """The UUIDv7 of millisecond ``ms`` with the low 74 bits of ``rand`` as its random bits.

    As asyncpg's own UUID (a ``uuid.UUID`` in C): made, printed in the answer and encoded for the statement in
    0.3 µs where ``uuid.UUID(int=...)`` took 1.3 µs, ``str()`` 0.8 µs and ``.bytes`` more (best of 5 in process).
    """
    value = (ms & (1 << 48) - 1) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64
    return _FastUUID((value | 0b10 << 62 | rand & (1 << 62) - 1).to_bytes(16, "big"))


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

    async def ingest(self, request: IngestRow) -> asyncpg.Record:
        """Write one request in the next batch; its row of ``delivery_ingest`` once the batch committed."""
        done: asyncio.Future[asyncpg.Record] = asyncio.get_running_loop().create_future()
        self._queue.append((request, done))
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
                batch: list[_Pending] | None = None  # None until connected
                try:
                    # One connection for as long as batches keep coming: an acquire and release with a timeout
                    # cost 40-70 us of CPU (asyncpg's pool, in process), 3-4 us per request in batches of 16.
                    async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                        while self._queue:
                            batch = self._take()  # taken once connected: what queued meanwhile joins too
                            await self._write(conn, batch)
                except Exception as exc:  # no connection (or it broke on release): these requests get a 503
                    for _, done in self._take() if batch is None else batch:
                        if not done.done():
                            done.set_exception(exc)
        finally:
            # Counted down in the same step as the empty-queue check, never in a done-callback: a callback
            # runs a loop turn later, and a write queued in between would find no free writer and no writer
            # left to take it (seen: a gateway with 64 requests queued and idle).
            self._running -= 1

    async def _write(self, conn: Conn, batch: Sequence[_Pending]) -> None:
        metrics.INGEST_BATCH.observe(len(batch))
        # Alone: the statement itself wakes the workers (see the module docstring); else the notifier does.
        channel = notify.DELIVERIES if len(batch) == 1 and self._running == 1 else None
        if len(batch) > 1:
            try:
                rows = await _ingest(conn, [request for request, _ in batch])
            except Exception as exc:
                if database.is_unavailable(exc):
                    raise
            else:
                for row, (_, done) in zip(rows, batch, strict=True):
                    if not done.done():
                        done.set_result(row)
                return
        for request, done in batch:  # alone, or again one by one after the batch failed
            try:
                [row] = await _ingest(conn, [request], channel)
            except Exception as exc:
                if not done.done():
                    done.set_exception(exc)
                if database.is_unavailable(exc):
                    raise
                continue
            if not done.done():
                done.set_result(row)


async def _ingest(conn: Conn, rows: Sequence[IngestRow], channel: str | None = None) -> list[asyncpg.Record]:
    return await conn.fetch(Q.delivery_ingest, *IngestRow.arguments(rows), channel)
