"""The delivery worker (ARCHITECTURE §5): a PostgreSQL queue of webhook deliveries, turned into dispatched runs.

Claims are batched, round-robin across workspaces and, within each, across its triggers (so a workspace with
many busy triggers gets no more of a batch than one with a single trigger), leased with a token
(``delivery_lease_s``); every complete/retry/defer write is guarded by ``id + lease_token + status='queued'``
(zero rows: someone else owns it now, harmless). Over a trigger's pacing budget a delivery is released to the
window's end without spending an attempt; a failed dispatch spends one and comes back after exponential
backoff with jitter, up to ``delivery_max_attempts``. One path: the take (``worker/take.py``) claims a batch
and dispatches the plain deliveries in one statement; it leases the others for the one-by-one path here. A
delivery ingress stored but never admitted (the crash window) is re-checked like ingress would (trigger
enabled, autopilot active, event filter) and then admitted. For an HTTP agent the worker claims the new task
in the same transaction and pushes it at once: no second queue hop. A take that fails is logged and tried
again on the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from autopilot import admission, dispatch, tasks
from autopilot.deliveries import Delivery
from hookgate import database, metrics, notify
from hookgate.context import Context
from hookgate.database import Conn
from hookgate.errors import LeaseLost
from hookgate.notify import NotifyListener
from sql import Q
from worker import take
from worker.push import Pusher, Reservations

log = logging.getLogger("hookgate.deliveries")

#: Triggers visited per workspace and claim: the round-robin fan-out within a workspace.
TRIGGER_FANOUT = 16
#: Workspaces whose trigger cursor a worker remembers (least recently visited forgotten first).
TRIGGER_CURSORS = 1024
#: Deliveries a dispatcher commits together on the one-by-one path when the queue is backed up.
COMMIT_GROUP = 8


def options_for(ctx: Context, holder: str, pusher: Pusher | None,
                held: Reservations | None = None) -> dispatch.Options:
    """Dispatch options from settings; claim the task at once when this process can push it.

    ``held``: the one-by-one path claims only within the fair shares, in slots held there.
    """
    s = ctx.settings
    claim = None
    if pusher is not None and pusher.capacity() > 0:
        claim = dispatch.ClaimFor(holder, s.push_timeout_cap_s, s.push_lease_margin_s, s.agent_max_concurrency,
                                  admit=None if held is None else held.admit)
    return dispatch.Options(s.heartbeat_timeout_s, s.retry_schedule.attempts, claim)


@dataclass(frozen=True)
class Takers:
    """Which deliveries that ingress announces by name this worker takes: ``rank`` of ``count`` listening workers.

    Every delivery worker hears every announcement. Two workers take each announced delivery by name, the two
    its id falls to among the listening workers (``server_delivery_takers``, read again at least every
    ``worker_poll_s``): the first of them free to take it gets it, and the other's take finds it gone. Two,
    not one: a worker busy with a push or a commit when the notice comes would hold its delivery up, and with
    two the delivery waits for the sooner (alternated runs of the end-to-end phase of ``bench/dispatch.py``
    measured a single owner slower at p50; docs/BENCHMARKS.md). Two, not all: each further worker's take would
    also find nothing, a round trip and a statement for nothing. Views that disagree while a worker comes or
    goes cost a take more, or leave a delivery to the next walk of the queue, which every worker makes at least
    every ``worker_poll_s``: never one lost.
    """

    rank: int = 0
    count: int = 1

    def owns(self, delivery: UUID) -> bool:
        """Whether this worker takes ``delivery`` when it is announced (ids are UUIDv7: their low bits are random)."""
        first = delivery.int % self.count
        return self.rank in (first, (first + 1) % self.count)

    @classmethod
    def among(cls, listening: list[int], own: int | None) -> Takers:
        """The share of the worker whose listening session is ``own`` among ``listening`` (all when not among them)."""
        return cls(listening.index(own), len(listening)) if own in listening else cls()


def holding(pusher: Pusher | None) -> contextlib.AbstractContextManager[Reservations | None]:
    """The slots one dispatch transaction of the one-by-one path holds for its claims (None without a pusher)."""
    return contextlib.nullcontext() if pusher is None else Reservations(pusher)


class DeliveryWorker:
    """Claims queued deliveries and dispatches them with ``delivery_concurrency`` dispatchers."""

    name = "deliveries"

    def __init__(self, ctx: Context, *, holder: str, pusher: Pusher | None = None, wake: NotifyListener | None = None):
        self.ctx, self.settings, self.holder, self.pusher, self.wake = ctx, ctx.settings, holder, pusher, wake
        self._buffer = max(self.settings.delivery_batch, self.settings.delivery_concurrency)
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._stopping = asyncio.Event()
        self._taken = asyncio.Event()
        self._busy = 0
        self._cursor: UUID | None = None  # the workspace the last walk stopped at
        self._trigger_cursors: OrderedDict[UUID, UUID] = OrderedDict()  # per workspace, the trigger it stopped at
        #: Deliveries ingress announced by id since the last take (``notify.named_deliveries``), and whether the
        #: next take must walk the queue instead (a notice named none or too many, or the last take was full).
        self._named: list[UUID] = []
        self._look = True
        self._walked = 0.0  # when the claimer last walked the queue (monotonic)
        #: This worker's share of the announced deliveries, when it was last read, and whether a notice named only
        #: others' deliveries since the last take (then there is nothing to take until the next walk is due).
        self.takers = Takers()
        self._takers_read = -float("inf")
        self._foreign = False
        if wake is not None:
            wake.subscribe(notify.DELIVERIES, self._on_notice)

    async def take_batch(self, limit: int | None = None, now: datetime | None = None,
                         ids: list[UUID] | None = None) -> take.Taken:
        """Claim up to ``limit`` due deliveries and dispatch the plain ones in one round trip; push what it claimed.

        ``ids``: take only these (by key) instead of walking the queue. ``leased`` of the result: the deliveries
        left for the one-by-one path (crash window, create_issue, ...).
        """
        # The shares the take claims within hold until its claims are pushes the shares count (Pusher.claiming).
        async with contextlib.nullcontext() if self.pusher is None else self.pusher.claiming:
            taken = await self._take(limit, now, ids)
            if self.pusher is not None:
                for claimed in taken.claimed:
                    self.pusher.submit(claimed)
        self._advance(taken)
        metrics.CLAIMS.labels("deliveries").inc(taken.dispatched + len(taken.leased))
        metrics.CLAIMS.labels("tasks").inc(len(taken.claimed))
        metrics.count_outcomes("deliveries", ["dispatched"] * taken.dispatched)
        return taken

    async def _take(self, limit: int | None, now: datetime | None, ids: list[UUID] | None) -> take.Taken:
        s = self.settings
        options = options_for(self.ctx, self.holder, self.pusher)
        capacity = self.pusher.capacity() if self.pusher is not None else 0
        rooms = self.pusher.rooms() if self.pusher is not None else None
        async with self.ctx.pool.acquire() as conn:
            return await take.take_batch(conn, limit=limit or s.delivery_batch, lease_s=s.delivery_lease_s,
                                         cursor=self._cursor, fanout=TRIGGER_FANOUT, options=options,
                                         capacity=capacity, now=now, trigger_cursors=self._trigger_cursors,
                                         rooms=rooms, ids=ids)

    def _advance(self, taken: take.Taken) -> None:
        """Move the round-robin cursors past what this take visited, so the next one starts after it."""
        self._cursor = take.next_cursor(self._cursor, taken.workspaces)
        for workspace, triggers in taken.workspaces.items():
            cursor = take.next_cursor(self._trigger_cursors.get(workspace), triggers)
            if cursor is not None:
                self._trigger_cursors[workspace] = cursor
                self._trigger_cursors.move_to_end(workspace)
        while len(self._trigger_cursors) > TRIGGER_CURSORS:
            self._trigger_cursors.popitem(last=False)

    async def process(self, delivery: Delivery) -> str:
        """Dispatch one leased delivery: ``dispatched``, ``ignored``, ``retry`` or ``lost``."""
        with holding(self.pusher) as held:
            options = options_for(self.ctx, self.holder, self.pusher, held)
            try:
                async with self.ctx.pool.acquire() as conn:
                    outcome, result = await self._dispatch(conn, delivery, options)
            except LeaseLost:
                return "lost"
            except Exception as exc:
                log.warning("dispatch failed; will retry", exc_info=exc, extra={"delivery_id": str(delivery.id)})
                await self._retry(delivery, exc)
                return "retry"
            if result is not None and result.claimed is not None and held is not None:
                held.push(result.claimed)
        return outcome

    async def dispatch_leased(self, batch: list[Delivery]) -> list[str]:
        """The one-by-one path: dispatch leased deliveries, COMMIT_GROUP per transaction; on any error, singly."""
        if len(batch) > COMMIT_GROUP:
            return [o for i in range(0, len(batch), COMMIT_GROUP)
                    for o in await self.dispatch_leased(batch[i:i + COMMIT_GROUP])]
        if len(batch) <= 1:
            return [await self.process(d) for d in batch]
        with holding(self.pusher) as held:
            options = options_for(self.ctx, self.holder, self.pusher, held)
            try:
                async with self.ctx.pool.acquire() as conn, conn.transaction():
                    done = [await self._dispatch_in(conn, d, options) for d in batch]
            except Exception:
                done = None
            for _, result in done or []:
                if result is not None and result.claimed is not None and held is not None:
                    held.push(result.claimed)
        if done is None:
            # A lost lease or a failing delivery must not take the others with it: retry them singly.
            return [await self.process(d) for d in batch]
        return [outcome for outcome, _ in done]

    async def _dispatch(
        self, conn: Conn, d: Delivery, options: dispatch.Options
    ) -> tuple[str, dispatch.Dispatched | None]:
        async with conn.transaction():
            return await self._dispatch_in(conn, d, options)

    async def _dispatch_in(
        self, conn: Conn, d: Delivery, options: dispatch.Options
    ) -> tuple[str, dispatch.Dispatched | None]:
        """Admit (crash window) and dispatch one delivery inside the caller's transaction."""
        run_id = d.run_id or await conn.fetchval(Q.run_get_by_delivery, d.id)
        if run_id is None:
            admitted = await self._admit(conn, d)
            if admitted is None:
                return "ignored", None
            run_id = admitted.run_id
        result = await dispatch.dispatch_run(conn, run_id, options)
        if await conn.fetchval(Q.delivery_complete, d.id, d.lease_token, run_id) is None:
            raise LeaseLost
        return "dispatched", result

    async def _admit(self, conn: Conn, d: Delivery) -> admission.Admission | None:
        """The crash window: ingress steps 9-10 again, over one read of the facts; None when ignored."""
        request = d.admission()
        hb = self.settings.heartbeat_timeout_s
        [facts] = await admission.read_facts(conn, [request], hb)
        payload = (d.envelope or {}).get("payload")
        ignored = admission.Ignored.of("trigger_deleted") if facts is None else admission.why_ignored(
            facts, d.event, payload)
        if ignored is None:
            [admitted] = await admission.admit_many(conn, [request], heartbeat_timeout_s=hb, facts=[facts])
            return admitted
        if await conn.fetchval(Q.delivery_ignore, d.id, d.lease_token, ignored.code, ignored.reason) is None:
            raise LeaseLost
        return None

    async def _retry(self, d: Delivery, exc: BaseException) -> None:
        s = self.settings
        delay = tasks.backoff(d.dispatch_attempts + 1, s.delivery_backoff_base_s, s.delivery_backoff_cap_s)
        try:
            async with self.ctx.pool.acquire() as conn:
                await conn.fetchrow(Q.delivery_retry, d.id, d.lease_token, delay, s.delivery_max_attempts,
                                    f"{exc.__class__.__name__}: {exc}"[:500])
        except database.DATABASE_ERRORS as db_exc:
            # The lease expires on its own; the delivery is claimable again then.
            log.warning("could not record a dispatch retry", extra={"error": str(db_exc)})

    async def run_once(self, now: datetime | None = None) -> int:
        """Claim one batch and dispatch all of it (tests, bench); returns how many were claimed."""
        taken = await self.take_batch(self.settings.delivery_batch, now)
        gate = asyncio.Semaphore(self.settings.delivery_concurrency)

        async def one(d: Delivery) -> None:
            async with gate:
                metrics.count_outcomes("deliveries", [await self.process(d)])

        await asyncio.gather(*(one(d) for d in taken.leased))
        return taken.dispatched + len(taken.leased)

    async def run(self) -> None:
        """Claim and dispatch until stopped."""
        workers = [asyncio.create_task(self._dispatcher()) for _ in range(self.settings.delivery_concurrency)]
        try:
            await self._claimer()
        finally:
            await self._drain(workers)

    async def _claimer(self) -> None:
        while not self._stopping.is_set():
            room = self._buffer - self._queue.qsize()
            # Backed up: claim again once half the buffer is free (claims of a few rows cost a round trip each).
            if room <= 0 or (room < self._buffer // 2 and self._busy):
                self._taken.clear()
                await self._pause(self._taken.wait(), self.settings.worker_poll_s)
                continue
            named = self._named_take(room)
            if named == []:  # only other workers' deliveries were announced: nothing to take before the next walk
                await self._pause(self._wake(), self._walked + self.settings.worker_poll_s - time.monotonic())
                continue
            if named is None:
                await self._read_takers()
            try:
                taken = await self.take_batch(room, ids=named)
            except database.DATABASE_ERRORS as exc:
                # The take is one statement: it wrote nothing. Its deliveries are taken again on the next pass.
                log.warning("delivery take failed; trying again next pass", extra={"error": str(exc)})
                taken, self._look = take.Taken(), True
            for row in taken.leased:
                self._queue.put_nowait(row)
            if taken.dispatched + len(taken.leased) < room:
                await self._pause(self._wake(), self.settings.worker_poll_s)
            else:
                self._look = True  # a full take: more may wait behind it, and the fair walk shares them out

    def _on_notice(self, payload: str) -> None:
        """A ``hookgate_deliveries`` notice: remember the deliveries it names, or that the queue must be walked."""
        named = notify.named_deliveries(payload)
        if named is None:
            self._look = True
            self._named.clear()  # the walk finds them
            return
        mine = [d for d in named if self.takers.owns(d)]
        self._foreign = self._foreign or len(mine) < len(named)
        if len(self._named) + len(mine) > self._buffer:
            self._look = True
            self._named.clear()
        else:
            self._named.extend(mine)

    def _named_take(self, room: int) -> list[UUID] | None:
        """The deliveries the next take reads by key, None to walk the queue, or [] for no take now.

        By key only while every delivery announced since the last take fits in it and nothing is known to wait
        behind them: then the walk's fairness has nothing to share out, and its index probes (which step over
        every entry that left the queue since the last vacuum) cost most of a webhook's way to its agent. The
        queue is still walked at least every ``worker_poll_s``: for paced, retried and unannounced deliveries,
        and for other workers' shares of the announced ones (:class:`Takers`) that nobody took. [] when the
        notices since the last take named only other workers' deliveries.
        """
        named, self._named = self._named, []
        look, self._look = self._look, False
        foreign, self._foreign = self._foreign, False
        clock = time.monotonic()
        due = clock - self._walked >= self.settings.worker_poll_s
        if look or len(named) > room or due or not (named or foreign):
            self._walked = clock
            return None
        return named  # [] when only other workers' deliveries were announced

    async def _read_takers(self) -> None:
        """Read this worker's share of the announced deliveries again, at most every ``worker_poll_s``."""
        clock = time.monotonic()
        if self.wake is None or clock - self._takers_read < self.settings.worker_poll_s:
            return
        self._takers_read = clock
        try:
            async with self.ctx.pool.acquire() as conn:
                listening = [r["pid"] for r in await conn.fetch(Q.server_delivery_takers)]
        except database.DATABASE_ERRORS:
            listening = []  # not known: take every announced delivery, as a lone worker does
        self.takers = Takers.among(listening, self.wake.server_pid)

    async def _wake(self) -> None:
        if self.wake is not None:
            await self.wake.wait(notify.DELIVERIES, self.settings.worker_poll_s)
        else:
            await asyncio.sleep(self.settings.worker_poll_s)

    async def _pause(self, waiter: Any, timeout: float) -> None:
        """Wait for ``waiter`` or ``timeout`` seconds, but return at once when stopping."""
        tasks_ = [asyncio.ensure_future(waiter), asyncio.ensure_future(self._stopping.wait())]
        await asyncio.wait(tasks_, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks_:
            t.cancel()
        await asyncio.gather(*tasks_, return_exceptions=True)

    async def _dispatcher(self) -> None:
        while True:
            batch = [await self._queue.get()]
            self._busy += 1
            # Take what is there: the one-by-one path commits up to COMMIT_GROUP per transaction.
            while len(batch) < self._buffer and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._taken.set()
            try:
                # What is queued is what the take leased: the one-by-one path.
                metrics.count_outcomes("deliveries", await self.dispatch_leased(batch))
            finally:
                self._busy -= 1

    async def _drain(self, workers: list[asyncio.Task[None]]) -> None:
        """Release what was leased but not started; let started dispatches finish (they are short)."""
        leftovers = []
        while not self._queue.empty():
            leftovers.append(self._queue.get_nowait())
        with contextlib.suppress(*database.DATABASE_ERRORS):
            async with self.ctx.pool.acquire() as conn:
                for d in leftovers:
                    await conn.execute(Q.delivery_release, d.id, d.lease_token)
        while self._busy:
            await asyncio.sleep(0.01)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    async def stop(self) -> None:
        """Stop claiming; the run loop releases buffered leases and lets in-flight dispatches finish."""
        self._stopping.set()
