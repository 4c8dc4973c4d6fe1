"""Dispatch runs that have no delivery to carry them (manual, api, schedule), and repair half-made runs.

The admin API and the scheduler only admit a run ``pending`` and NOTIFY ``hookgate_runs``; this loop makes
its issue/task. Runs left pending or half-made (an issue without its task) for ``run_repair_after_s``
are dispatched again: dispatch is idempotent, so repair completes them and never duplicates. A webhook run
whose delivery is still queued is not half-made: the delivery path dispatches it, within its trigger's pacing.
Runs without a delivery are claimed on every pass; the sweep for half-made ones runs at most every
REPAIR_SWEEP_S, since a backlog of webhook runs older than the repair delay (paced, say) is read by each sweep.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from autopilot import dispatch
from hookgate import notify
from hookgate.context import Context
from hookgate.notify import NotifyListener
from sql import Q
from worker.deliveries import holding, options_for
from worker.loop import PollingService
from worker.push import Pusher, Reservations

log = logging.getLogger("hookgate.runs")

#: Runs dispatched per pass before the loop yields.
PASS_LIMIT = 64
#: How often (seconds, at most) a pass also sweeps for runs left half-made past ``run_repair_after_s``.
REPAIR_SWEEP_S = 5.0


class RunWorker(PollingService):
    """Dispatches pending runs, one locked run per short transaction."""

    name = "runs"
    channel = notify.RUNS

    def __init__(self, ctx: Context, *, holder: str, pusher: Pusher | None = None, wake: NotifyListener | None = None):
        super().__init__(interval=ctx.settings.worker_poll_s, wake=wake)
        self.ctx, self.holder, self.pusher = ctx, holder, pusher
        #: When the last sweep for half-made runs began (monotonic); None: none yet.
        self.swept_at: float | None = None

    async def run_once(self, now: datetime | None = None) -> int:
        """Dispatch runs; returns how many were handled.

        Up to PASS_LIMIT runs without a delivery, then (at most every REPAIR_SWEEP_S) up to PASS_LIMIT runs left
        half-made.
        """
        done = await self._drain(Q.run_claim_undispatched, ())
        clock = time.monotonic()
        if self.swept_at is None or clock - self.swept_at >= REPAIR_SWEEP_S:
            self.swept_at = clock
            done += await self._drain(Q.run_claim_stale, (self.ctx.settings.run_repair_after_s, now))
        return done

    async def _drain(self, claim: str, args: tuple[Any, ...]) -> int:
        done = 0
        while done < PASS_LIMIT and not self._stopping.is_set():
            with holding(self.pusher) as held:
                result = await self._one(claim, args, held)
                if result is None:
                    break
                done += 1
                if result.claimed is not None and held is not None:
                    held.push(result.claimed)
        return done

    async def _one(self, claim: str, args: tuple[Any, ...], held: Reservations | None) -> dispatch.Dispatched | None:
        run_id = None
        async with self.ctx.pool.acquire() as conn:
            try:
                async with conn.transaction():
                    run_id = await conn.fetchval(claim, *args)
                    if run_id is None:
                        return None
                    options = options_for(self.ctx, self.holder, self.pusher, held)
                    return await dispatch.dispatch_run(conn, run_id, options)
            except Exception as exc:
                log.warning("run dispatch failed; will retry", exc_info=exc)
                if run_id is not None:
                    await conn.execute(Q.run_touch, run_id)
                return None
