"""The shape every long-running role shares, and the loop that runs several until a signal stops them.

A service has ``run()`` (until stopped) and ``stop()`` (stop taking work, drain within a deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Protocol

log = logging.getLogger("hookgate.service")


class Service(Protocol):
    """A long-running role: delivery worker, push worker, scheduler, HTTP server."""

    name: str

    async def run(self) -> None:
        """Work until :meth:`stop` is called."""

    async def stop(self) -> None:
        """Stop claiming new work, finish or release what is held, return."""


SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stop:
    """What SIGTERM and SIGINT do over a role process's life (see :func:`handle_signals`)."""

    def __init__(self, starting: asyncio.Task[object]) -> None:
        self.requested = asyncio.Event()
        self.running = False  # set by run_services once the services run
        self.interrupted_start = False
        self._starting = starting

    def signal(self, sig: int) -> None:
        """Before the services run: cancel start-up. While they run: ask them to stop. After: nothing more."""
        first = not self.requested.is_set()
        self.requested.set()
        if first and not self.running:
            self.interrupted_start = True
            log.info("stopped during start-up", extra={"signal": signal.Signals(sig).name})
            self._starting.cancel()


@contextlib.contextmanager
def handle_signals() -> Iterator[Stop]:
    """Handle SIGTERM/SIGINT in the calling task for as long as the block runs.

    Start-up (the embedded PostgreSQL, migrations, the pool) is cancelled by the first signal. It unwinds
    through its own cleanup, the cancellation ends here, and the process exits normally, as it does after a
    stop once running. Without this, a signal before the services ran took the default action: the process
    died with -15 and its cleanup never ran. Once the services run, :func:`run_services` stops them. A
    signal during the cleanup after them changes nothing, since the cleanup is short and bounded.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    stop = Stop(task)
    for sig in SIGNALS:
        loop.add_signal_handler(sig, stop.signal, sig)
    try:
        yield stop
    except asyncio.CancelledError:
        if not stop.interrupted_start:
            raise
        task.uncancel()
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)


async def run_services(services: list[Service], *, deadline: float, stop: Stop,
                       on_start: Callable[[], None] | None = None) -> None:
    """Run every service; when ``stop`` is requested (a signal) or one service ends, stop all within ``deadline`` s.

    ``on_start`` runs once, before the services start.
    """
    stop.running = True
    if on_start is not None:
        on_start()
    tasks = {asyncio.create_task(s.run(), name=s.name): s for s in services}
    waiter = asyncio.create_task(stop.requested.wait())
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
