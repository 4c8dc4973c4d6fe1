"""LISTEN/NOTIFY: the channel names, and the listener each process role holds (one connection, an event per channel).

A notification is only a hint: every loop also polls, so a lost notification (or a dropped listening
connection, or a transaction-mode pooler in between) costs latency, never work. The worker's loops wait on
the per-channel events; the gateway's long-polling runtime claims (``gateway.claim_wait``) and the
scheduler subscribe to the payloads instead. Python sends with ``Q.notify_send`` and one of the constants
below; SQL that notifies from inside the database spells the names out (keep them in step):
``hookgate_tasks`` in ``sql/functions/hookgate_delivery_take.sql``, ``hookgate_runs`` in
``sql/queries/autopilot_run.sql`` (``run_notify_pending``), and older copies in ``sql/migrations/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import asyncpg

from hookgate import database

log = logging.getLogger("hookgate.notify")

#: A delivery was queued (ingress after its commit, a replay): the delivery worker claims it.
DELIVERIES = "hookgate_deliveries"
#: A run was admitted ``pending`` (admin API, scheduler): the run worker dispatches it.
RUNS = "hookgate_runs"
#: A task is queued for an agent (dispatch, a requeue): the push worker and waiting runtime claims take it.
TASKS = "hookgate_tasks"
#: A running task was cancelled (its run cancelled or past its deadline, its issue closed): payload = task id.
#: The worker pushing it aborts the push.
CANCELS = "hookgate_cancels"
#: A trigger's schedule changed (admin API, edits): the scheduler plans again.
TRIGGERS = "hookgate_triggers"
#: A notification was queued for a channel (an alert was raised, a channel's test): the alert sender sends it.
ALERTS = "hookgate_alerts"
#: What the worker role listens to.
WORKER_CHANNELS = (DELIVERIES, RUNS, TASKS, ALERTS, CANCELS)


class NotifyListener:
    """Holds the LISTEN connection (reconnected lazily) and an event per channel."""

    name = "listen"

    def __init__(self, dsn: str, channels: tuple[str, ...] = WORKER_CHANNELS) -> None:
        self.dsn = dsn
        self.events = {ch: asyncio.Event() for ch in channels}
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._stopped = asyncio.Event()
        self._subscribers: dict[str, list[Callable[[str], None]]] = {ch: [] for ch in channels}

    @property
    def application_name(self) -> str:
        """How the listening session shows in ``pg_stat_activity``: ``hookgate listen <pid>``."""
        return f"hookgate listen {os.getpid()}"

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
                conn = await database.connect(self.dsn, server_settings={"application_name": self.application_name})
                for channel in self.events:
                    await conn.add_listener(channel, self._on_notify)
            except database.DATABASE_ERRORS as exc:
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
