"""LISTEN/NOTIFY: the channel names, and the listener each process role holds (one connection, an event per channel).

A notification is only a hint: every loop also polls, so a lost notification (or a dropped listening
connection, or a transaction-mode pooler in between) costs latency, never work. A lost listening connection
is reopened by the listener itself within about a second of the database (a new primary) accepting
connections again; one that stops answering is noticed by a ping. The worker's loops wait on
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
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import asyncpg

from hookgate import database
from sql import Q

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
#: A ``hookgate_deliveries`` payload names the deliveries it announces, comma-separated, up to NAMED_MAX of them
#: (a worker takes named deliveries by key while nothing waits behind them); past that, or from a sender that
#: names none, it is ANY (or any other text): look at the queue.
NAMED_MAX = 64
ANY = "*"

#: What the worker role listens to.
WORKER_CHANNELS = (DELIVERIES, RUNS, TASKS, ALERTS, CANCELS)


#: Longest a (re)connect of the listening session may take before it is given up and tried again.
CONNECT_TIMEOUT_S = 5.0
#: How often an idle listening session is pinged, and how long a ping may take: a server that vanished
#: without closing the connection (its machine lost, a partition) is noticed within their sum.
PING_INTERVAL_S = 5.0
PING_TIMEOUT_S = 3.0
#: First and longest pause between reconnect attempts while the database stays out of reach (it doubles).
RECONNECT_MIN_S = 0.1
RECONNECT_MAX_S = 1.0


def name_deliveries(ids: Sequence[object]) -> str:
    """The ``hookgate_deliveries`` payload announcing queued deliveries: their ids, or ANY past NAMED_MAX."""
    return ",".join(str(i) for i in ids) if 0 < len(ids) <= NAMED_MAX else ANY


def named_deliveries(payload: str) -> list[UUID] | None:
    """The deliveries a ``hookgate_deliveries`` payload names; None when it names none (look at the queue)."""
    try:
        return [UUID(part) for part in payload.split(",")]
    except ValueError:
        return None


class NotifyListener:
    """Holds the LISTEN connection and an event per channel; a keeper task reopens the connection when it is lost.

    The keeper (started by :meth:`ensure` or :meth:`wait`) reconnects as soon as the session closes (a
    termination listener wakes it), then every ``RECONNECT_MIN_S`` doubling to ``RECONNECT_MAX_S`` while the
    database is out of reach, and pings an open session every ``ping_interval`` s: after a failover the
    session is back on the new primary about a second after it accepts connections. It runs in its own
    task, so a waiter's timeout never cancels a connect in progress.
    """

    name = "listen"

    def __init__(self, dsn: str, channels: tuple[str, ...] = WORKER_CHANNELS, *,
                 ping_interval: float = PING_INTERVAL_S, ping_timeout: float = PING_TIMEOUT_S) -> None:
        self.dsn = dsn
        self.ping_interval, self.ping_timeout = ping_interval, ping_timeout
        self.events = {ch: asyncio.Event() for ch in channels}
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._lost = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._failing = False
        self._stopped = asyncio.Event()
        self._subscribers: dict[str, list[Callable[[str], None]]] = {ch: [] for ch in channels}

    @property
    def application_name(self) -> str:
        """How the listening session shows in ``pg_stat_activity``: ``hookgate listen <pid>``.

        A listener of announced deliveries adds `` deliveries``: the delivery workers find each other by it
        (``server_delivery_takers``) to share out the deliveries ingress names.
        """
        return f"hookgate listen {os.getpid()}" + (" deliveries" if DELIVERIES in self.events else "")

    @property
    def server_pid(self) -> int | None:
        """The server process id of the listening session while it is open, else None."""
        conn = self._conn
        return conn.get_server_pid() if conn is not None and not conn.is_closed() else None

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
        """Open the listening connection now if it is not there (failures are logged, polling goes on); keep it open."""
        self._keep()
        await self._open()

    def _keep(self) -> None:
        if (self._keeper is None or self._keeper.done()) and not self._stopped.is_set():  # not after stop()
            self._keeper = asyncio.ensure_future(self._keep_open())

    async def _open(self) -> bool:
        async with self._lock:
            if self.connected:
                return True
            conn = None
            try:
                conn = await database.connect(self.dsn, timeout=CONNECT_TIMEOUT_S,
                                              server_settings={"application_name": self.application_name})
                for channel in self.events:
                    await conn.add_listener(channel, self._on_notify)
            except database.DATABASE_ERRORS as exc:
                if conn is not None:
                    conn.terminate()
                if not self._failing:  # once per outage, not at every attempt
                    log.warning("listen connection failed; polling only", extra={"error": str(exc)})
                self._failing = True
                return False
            conn.add_termination_listener(self._on_lost)
            self._lost.clear()
            self._conn = conn
            if self._failing:
                log.info("listen connection back")
                self._failing = False
            return True

    def _on_lost(self, conn: Any) -> None:
        if conn is self._conn:
            self._lost.set()

    async def _keep_open(self) -> None:
        """Reconnect when the session is lost or stops answering; back off while the database is out of reach."""
        pause = RECONNECT_MIN_S
        while True:
            if not self.connected:
                if not await self._open():
                    await asyncio.sleep(pause)
                    pause = min(RECONNECT_MAX_S, pause * 2)
                    continue
                pause = RECONNECT_MIN_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), self.ping_interval)
            if self._lost.is_set() or not await self._answers():
                log.warning("listen connection lost; reconnecting")
                await self._drop()

    async def _answers(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        try:
            await conn.fetchval(Q.server_ping, timeout=self.ping_timeout)
        except database.DATABASE_ERRORS:
            return False
        return True

    async def _drop(self) -> None:
        """Forget the session without a goodbye (its server may be gone)."""
        async with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def wait(self, channel: str, timeout: float) -> bool:
        """Wait for a notification on ``channel`` or ``timeout`` seconds; True if notified."""
        self._keep()
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
        """Stop the keeper and close the listening connection."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        async with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    await self._conn.close(timeout=2)
                self._conn = None

    async def run(self) -> None:
        """As a service: open the connection, then keep it open until :meth:`stop`."""
        await self.ensure()
        await self._stopped.wait()

    async def stop(self) -> None:
        """As a service: close the listening connection (a later wait() does not reopen it)."""
        self._stopped.set()
        await self.close()
