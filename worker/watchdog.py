"""The worker's own lease watchdog loop, so a deployment without a scheduler still recovers abandoned work.

It runs the same sweep as the scheduler's ``lease_watchdog`` job (``scheduler.maintenance.leases``), every
``watchdog_interval_s``; concurrent sweeps are safe, so running both is harmless.
"""

from __future__ import annotations

from hookgate.context import Context
from scheduler.maintenance.leases import sweep
from worker.loop import PollingService


class WatchdogLoop(PollingService):
    """Runs :func:`~scheduler.maintenance.leases.sweep` every ``watchdog_interval_s``."""

    name = "watchdog"

    def __init__(self, ctx: Context) -> None:
        super().__init__(interval=ctx.settings.watchdog_interval_s)
        self.ctx = ctx

    async def run_once(self) -> int:
        """One sweep; always reports idle so the loop waits a full interval."""
        async with self.ctx.pool.acquire() as conn:
            await sweep(conn, heartbeat_timeout_s=self.ctx.settings.heartbeat_timeout_s)
        return 0
