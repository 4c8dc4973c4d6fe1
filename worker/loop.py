"""The shape the worker's polling services share: ``run_once()`` until stopped, woken early by NOTIFY."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hookgate import database
from hookgate.notify import NotifyListener

log = logging.getLogger("hookgate.worker")


class PollingService:
    """Calls :meth:`run_once` in a loop; when it found nothing, waits for ``channel`` or ``interval`` s."""

    name = "loop"
    channel: str | None = None

    def __init__(self, *, interval: float, wake: NotifyListener | None = None, settle: float = 0.0) -> None:
        self.interval, self.wake, self.settle = interval, wake, settle
        self._stopping = asyncio.Event()

    async def run_once(self) -> int:
        """One pass; returns how much work it did (0 = idle)."""
        raise NotImplementedError

    async def run(self) -> None:
        """Loop until :meth:`stop`; database errors are logged and retried after a pause."""
        while not self._stopping.is_set():
            try:
                done = await self.run_once()
            except database.DATABASE_ERRORS as exc:
                log.warning("%s pass failed", self.name, extra={"error": str(exc)})
                done = 0
            if done == 0:
                await self._idle()
            elif self.settle:
                await asyncio.sleep(self.settle)

    async def _idle(self) -> None:
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._stopping.wait())]
        if self.wake is not None and self.channel is not None:
            waiters.append(asyncio.ensure_future(self.wake.wait(self.channel, self.interval)))
        await asyncio.wait(waiters, timeout=self.interval, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        if self.settle and not self._stopping.is_set():
            await asyncio.sleep(self.settle)

    async def stop(self) -> None:
        """Stop after the current pass."""
        self._stopping.set()
