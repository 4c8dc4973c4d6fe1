"""The shape every long-running role shares, and the loop that runs several until a signal stops them.

A service has ``run()`` (until stopped) and ``stop()`` (stop taking work, drain within a deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("hookgate.service")


class Service(Protocol):
    """A long-running role: delivery worker, push worker, scheduler, HTTP server."""

    name: str

    async def run(self) -> None:
        """Work until :meth:`stop` is called."""

    async def stop(self) -> None:
        """Stop claiming new work, finish or release what is held, return."""


async def run_services(services: list[Service], *, deadline: float,
                       on_start: Callable[[], None] | None = None) -> None:
    """Run every service; on SIGTERM/SIGINT (or one service ending) stop all within ``deadline`` seconds.

    ``on_start`` runs once the signals are handled, before the services start (so start-up work there
    cannot widen the window in which a SIGTERM still kills the process outright).
    """
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    if on_start is not None:
        on_start()
    tasks = {asyncio.create_task(s.run(), name=s.name): s for s in services}
    waiter = asyncio.create_task(stopping.wait())
    try:
        done, _ = await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in done if t is not waiter and t.exception() is not None]
        for task in failed:
            log.error("service %s failed", task.get_name(), exc_info=task.exception())
        log.info("shutting down", extra={"deadline_s": deadline})
        await _stop_all(tasks, deadline)
        if failed:
            raise SystemExit(1)
    finally:
        waiter.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def _stop_all(tasks: dict[asyncio.Task[None], Service], deadline: float) -> None:
    stops = [asyncio.create_task(s.stop()) for s in tasks.values()]
    pending = [t for t in tasks if not t.done()]
    _, late = await asyncio.wait([*stops, *pending], timeout=deadline) if pending or stops else (set(), set())
    for task in late:
        log.warning("did not stop within the deadline; cancelling", extra={"task": task.get_name()})
        task.cancel()
    for task in late:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
