"""Wake-ups from LISTEN/NOTIFY: one listening connection per process role, one event per channel.

A notification is only a hint: every loop also polls, so a lost notification (or a dropped listening
connection, or a transaction-mode pooler in between) costs latency, never work. The worker's loops wait on
the per-channel events; the gateway's long-polling runtime claims subscribe to the payloads instead
(:mod:`gateway.claim_wait`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from hookgate import database

log = logging.getLogger("hookgate.worker")

CHANNELS = ("hookgate_deliveries", "hookgate_runs", "hookgate_tasks")


class Wakeup:
    """Holds the LISTEN connection (reconnected lazily) and an event per channel."""

    name = "listen"

    def __init__(self, dsn: str, channels: tuple[str, ...] = CHANNELS) -> None:
        self.dsn = dsn
        self.events = {ch: asyncio.Event() for ch in channels}
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._stopped = asyncio.Event()
        self._subscribers: dict[str, list[Callable[[str], None]]] = {ch: [] for ch in channels}

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: object) -> None:
        event = self.events.get(channel)
        if event is not None:
            event.set()
        for callback in self._subscribers.get(channel, ()):
            callback(str(payload))

    def subscribe(self, channel: str, callback: Callable[[str], None]) -> None:
        """Also call ``callback(payload)`` (synchronously, in the event loop) for each notification."""
        self._subscribers[channel].append(callback)

    @property
    def connected(self) -> bool:
        """True while the listening connection is open (notifications can arrive)."""
        return self._conn is not None and not self._conn.is_closed()

    async def ensure(self) -> None:
        """(Re)open the listening connection if it is not there; failures are logged, polling goes on."""
        async with self._lock:
            if self.connected:
                return
            try:
                conn = await database.connect(self.dsn)
                for channel in self.events:
                    await conn.add_listener(channel, self._on_notify)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("listen connection failed; polling only", extra={"error": str(exc)})
                return
            self._conn = conn

    async def wait(self, channel: str, timeout: float) -> bool:
        """Wait for a notification on ``channel`` or ``timeout`` seconds; True if notified."""
        await self.ensure()
        event = self.events[channel]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        notified = event.is_set()
        event.clear()
        return notified

    def poke(self, channel: str) -> None:
        """Wake ``channel``'s waiter from inside the process (e.g. a push slot was freed)."""
        self.events[channel].set()

    async def close(self) -> None:
        """Close the listening connection."""
        async with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    await self._conn.close(timeout=2)
                self._conn = None

    async def run(self) -> None:
        """As a service: open the connection, then wait until :meth:`stop`."""
        await self.ensure()
        await self._stopped.wait()

    async def stop(self) -> None:
        """As a service: close the listening connection."""
        await self.close()
        self._stopped.set()
