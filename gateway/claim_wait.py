"""Long-polling runtime claims (``POST /v1/runtime/claim {"wait_s"}``), woken by NOTIFY ``hookgate_tasks``.

One LISTEN connection per gateway process (a :class:`hookgate.notify.NotifyListener`), shared by every waiting
request: opened when the first claim waits, reopened by the poll tick after it dropped, closed by
:meth:`ClaimWaits.close` on shutdown. A notification is only a hint: a poll tick every ``poll_s`` also
wakes every waiting agent, which is how retries that came due by time (announced by nobody) are found
and what a lost notification or a dead listener costs at most.

Waiters queue per agent (oldest first). A wake-up gives the agent's *turn* to its oldest waiter, which
tries one claim. If it wins it leaves and hands the turn on (there may be more work); if it finds
nothing the turn ends, since nothing is claimable for any waiter of that agent. So however many runtimes
of an agent wait, at most one claim statement per agent is in flight per process, wake-ups that come
during it fold into one more turn, and the runtime that waited longest is served first. Notifications
carry a task id; a burst of them is routed to the waiting agents with one lookup, so an unrelated
agent's work costs the other waiters nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import UUID

import asyncpg

from hookgate import database, notify
from hookgate.notify import NotifyListener
from sql import Q

log = logging.getLogger("hookgate.runtime")

#: More notifications than this in one burst are not routed one by one: every waiting agent is woken.
ROUTE_MAX = 500

T = TypeVar("T")


@dataclass(eq=False)
class _Waiter:
    """One waiting request: woken for its turn, or to leave (deadline, hang-up, shutdown)."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    turn: bool = False


@dataclass(eq=False)
class _Agent:
    """The waiters of one agent and its single turn (``busy`` while a waiter holds it)."""

    queue: deque[_Waiter] = field(default_factory=deque)
    busy: bool = False
    again: bool = False

    def kick(self) -> None:
        """Work may be claimable: give the turn to the oldest waiter, or fold into the turn in progress."""
        if self.busy:
            self.again = True
        elif self.queue:
            head = self.queue[0]
            self.busy, head.turn = True, True
            head.wake.set()

    def end_turn(self, waiter: _Waiter, *, pass_on: bool) -> None:
        """``waiter`` is done with its turn; another turn follows if asked or if a wake-up came meanwhile."""
        waiter.turn, self.busy = False, False
        if pass_on or self.again:
            self.again = False
            self.kick()


class ClaimWaits:
    """Every long-polling claim of one gateway process, woken by NOTIFY or by the poll tick."""

    def __init__(self, pool: asyncpg.Pool, dsn: str, *, poll_s: float, acquire_timeout: float,
                 wake: NotifyListener | None = None) -> None:
        self.pool, self.poll_s, self.acquire_timeout = pool, poll_s, acquire_timeout
        self.wake = wake or NotifyListener(dsn, (notify.TASKS,))
        self._agents: dict[UUID, _Agent] = {}
        self._payloads: list[str] = []
        self._notified = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self._connecting: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """How many requests wait right now (all agents)."""
        return sum(len(a.queue) for a in self._agents.values())

    async def claim(
        self, agent_id: UUID, attempt: Callable[[], Awaitable[T | None]], undo: Callable[[T], Awaitable[None]],
        *, timeout: float, gone: asyncio.Event,
    ) -> T | None:
        """Try ``attempt()`` at each of the agent's turns until it wins; None after ``timeout``, on shutdown or hang-up.

        ``gone`` set means the client hung up; a win nobody will receive (hang-up, cancellation) goes back by ``undo``.
        """
        if self._closed:
            return await attempt()
        self._start()
        agent = self._agents.setdefault(agent_id, _Agent())
        me = _Waiter()
        agent.queue.append(me)
        link = asyncio.ensure_future(self._link(gone, me))
        try:
            return await self._wait(agent, me, attempt, undo, time.monotonic() + timeout, gone)
        finally:
            link.cancel()
            if me in agent.queue:
                agent.queue.remove(me)
            if me.turn:  # woken for a turn it will not use: the next waiter takes it
                agent.end_turn(me, pass_on=True)
            if not agent.queue and not agent.busy and self._agents.get(agent_id) is agent:
                del self._agents[agent_id]

    async def _wait(
        self, agent: _Agent, me: _Waiter, attempt: Callable[[], Awaitable[T | None]],
        undo: Callable[[T], Awaitable[None]], deadline: float, gone: asyncio.Event,
    ) -> T | None:
        agent.kick()  # the first try goes through the turn too, so a crowd arriving at once claims once
        while not self._closed and not gone.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not me.turn:
                me.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(me.wake.wait(), remaining)
                continue
            won = await _finish(attempt, undo)
            if won is not None:
                agent.queue.remove(me)
                agent.end_turn(me, pass_on=True)
                if gone.is_set():
                    await undo(won)
                    return None
                return won
            agent.end_turn(me, pass_on=False)
        return None

    @staticmethod
    async def _link(gone: asyncio.Event, me: _Waiter) -> None:
        await gone.wait()
        me.wake.set()

    def _start(self) -> None:
        """Open the listener (in the background: a slow database must not hold the first claim) and the tick."""
        if not self._background:
            self.wake.subscribe(notify.TASKS, self._on_notify)
            self._background = [asyncio.ensure_future(self._route()), asyncio.ensure_future(self._tick())]
        self._listen()

    def _listen(self) -> None:
        if not self.wake.connected and (self._connecting is None or self._connecting.done()):
            self._connecting = asyncio.ensure_future(self.wake.ensure())

    def _on_notify(self, payload: str) -> None:
        if self._agents:
            if len(self._payloads) <= ROUTE_MAX:  # past that the burst wakes every agent: keep no more
                self._payloads.append(payload)
            self._notified.set()

    async def _tick(self) -> None:
        """The fallback: every ``poll_s`` every waiting agent gets a turn, and a dropped listener is reopened."""
        while True:
            await asyncio.sleep(self.poll_s)
            if self._agents:  # an idle gateway does not retry a dead listener every tick
                self._listen()
            for agent in list(self._agents.values()):
                agent.kick()

    async def _route(self) -> None:
        """Turn each burst of notifications into turns for the agents they concern."""
        while True:
            await self._notified.wait()
            self._notified.clear()
            payloads, self._payloads = self._payloads, []
            waiting = list(self._agents)
            if not waiting:
                continue
            for agent_id in await self._agents_of(payloads, waiting):
                if (agent := self._agents.get(agent_id)) is not None:
                    agent.kick()

    async def _agents_of(self, payloads: list[str], waiting: list[UUID]) -> list[UUID]:
        """The waiting agents the notified tasks belong to; all of them when that cannot be told cheaply."""
        if len(waiting) == 1 or len(payloads) > ROUTE_MAX:
            return waiting
        try:
            ids = [UUID(p) for p in payloads]
        except ValueError:
            return waiting
        try:
            async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                rows = await conn.fetch(Q.task_agents_among, ids, waiting)
        except database.DATABASE_ERRORS as exc:
            log.warning("claim wake-up not routed; waking every agent", extra={"error": exc.__class__.__name__})
            return waiting
        return [r["agent_id"] for r in rows]

    async def close(self) -> None:
        """Shutdown: every waiting claim returns at once (204), the listener closes, later claims do not wait."""
        self._closed = True
        for agent in self._agents.values():
            for waiter in agent.queue:
                waiter.wake.set()
        pending = [t for t in (*self._background, self._connecting) if t is not None]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self.wake.close()


async def _finish(attempt: Callable[[], Awaitable[T | None]], undo: Callable[[T], Awaitable[None]]) -> T | None:
    """Run ``attempt`` to its end even if the waiting request is cancelled meanwhile; then undo its win."""
    task = asyncio.ensure_future(attempt())
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            won = await task
            if won is not None:
                await undo(won)
        raise
