"""Several gateway processes on one port: ``hookgate gateway --workers N`` and ``hookgate serve --workers N``.

One Python process serves HTTP on one core. With ``--workers N`` (``HOOKGATE_GATEWAY_WORKERS``) the
command's own process binds the port, starts N gateway processes that serve it, and supervises them
(:class:`GatewayProcesses`); it serves no HTTP itself.

**Sockets: one SO_REUSEPORT socket per process, all bound by the supervisor.** Linux offers two ways for
processes to share a port. (a) One listening socket, inherited by every process: one queue of waiting
connections, taken by whichever process calls ``accept`` first. (b) One socket per process, each with
SO_REUSEPORT: the kernel puts each new connection in the queue of one socket, chosen by a hash of the
connection's addresses. We use (b), with every socket bound and kept open by the supervisor and handed to
its process by descriptor (:func:`gateway.sockets.listen_per_process`), because:

- (a) balances by timing, not by load: asyncio accepts everything waiting in one go, so the process that
  wakes first takes a whole burst. Measured with 64 keep-alive connections opened at once on 2 cores
  (``bench/ingress.py --workers 2``, docs/BENCHMARKS.md), (a) split them 61/3 in two windows of three;
  (b) splits them by the hash, 33/31 to 40/24 in every window;
- the port is still bound once, before any gateway process starts: the supervisor first binds it without
  SO_REUSEPORT and lets it go, so a port in use by anyone (even by another Hookgate's SO_REUSEPORT
  sockets, which could otherwise share it silently) is one error line, and ``--port 0`` gives every
  process the same port;
- the supervisor keeps every socket open: when a gateway process dies, the connections waiting in its
  queue, and the new ones the kernel keeps hashing to it, wait there for its replacement, which gets the
  same socket. Nothing is reset and nothing is rebound; those connections wait about the restart backoff
  plus a start (one to two seconds).

The price of (b): a process that is alive but stuck (not accepting) holds up its share of new
connections, where with (a) the others would take them. Processes do not get stuck by design (every
wait is bounded; a blocked event loop is a bug), and a dead one is replaced.

**Spawned, not forked.** Each gateway process is a fresh interpreter (``python -m hookgate.cli gateway``
with its sockets' descriptors passed by number). The supervising process of ``serve`` runs an event loop, a
pool and threads (the embedded PostgreSQL start, ``asyncio.to_thread``): a fork would copy that state and
locks held by other threads, and the pool's connections would be shared with the child. A spawned process
shares nothing with its parent but the sockets and the environment.

**Supervision.** Each gateway process also gets one end of a socket pair: it writes ``ready`` once its
server accepts connections (the parent prints ``hookgate ready`` once every process has), and it stops as on
SIGTERM when that pair reads end-of-file, which means the parent is gone (even by SIGKILL): no orphan keeps
serving the port. While the parent runs, a gateway process that exits, for whatever reason, is replaced after
a backoff: 0.25 s, doubled for each further process of that slot that dies within 60 s of its start, at most
30 s. One that fails before it was ever ready during the parent's own start fails the start: the others are
stopped and the parent exits with that process's code (its error line is the error). SIGTERM or SIGINT to the
parent closes the parent's copies of the sockets and sends SIGTERM to every gateway process; each drains as a
single gateway does, within ``HOOKGATE_SHUTDOWN_DEADLINE``, and one still running at the deadline is killed.

Everything a gateway keeps in memory is per process: its pool (N × ``HOOKGATE_POOL_MAX_SIZE`` connections),
the per-IP gates and ``HOOKGATE_MAX_CONNECTIONS`` (N × each limit), its ``/metrics`` counters (docs/SCALING.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger("hookgate.gateway.processes")

READY = b"ready\n"
#: Delay before a dead gateway process is replaced; doubled per quick death of its slot, up to the maximum.
RESTART_FIRST_S = 0.25
RESTART_MAX_S = 30.0
#: A gateway process that lived this long died of something else than a failing start: the backoff starts over.
HEALTHY_AFTER_S = 60.0


class StartFailed(Exception):
    """A gateway process exited before it ever listened, during the supervisor's start; ``code`` is its exit code.

    A positive code means it printed its own error line; the message says what happened otherwise.
    """

    def __init__(self, pid: int, code: int) -> None:
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
        super().__init__(f"gateway process {pid} {how} during start-up")
        self.code = code


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def restart_delay(quick_deaths: int) -> float:
    """Seconds before replacing a gateway process, after ``quick_deaths`` (≥ 1) deaths in a row of its slot."""
    return min(RESTART_MAX_S, RESTART_FIRST_S * float(2 ** min(quick_deaths - 1, 16)))


@dataclass
class _Child:
    """One running gateway process and the supervisor's end of its socket pair."""

    process: asyncio.subprocess.Process
    channel: socket.socket
    started: float

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    async def ready(self) -> bool:
        """Wait until the process says it listens (True) or its end of the pair closes first, as it exited (False)."""
        loop = asyncio.get_running_loop()
        said = b""
        while len(said) < len(READY):
            try:
                chunk = await loop.sock_recv(self.channel, len(READY))
            except OSError:
                return False
            if not chunk:
                return False
            said += chunk
        return said == READY

    def signal(self, sig: int) -> None:
        """Send ``sig`` unless the process is already gone."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)


class GatewayProcesses:
    """Gateway processes serving sockets this process bound; a service (``run`` supervises, ``stop`` drains).

    ``sockets`` holds one set of listening sockets per process (:func:`gateway.sockets.listen_per_process`):
    slot i always serves set i, also after a restart. ``argv`` is the command line of one gateway process up
    to its socket descriptors (``… gateway --host H --port P``); ``env`` is added to this process's
    environment for them.
    """

    name = "gateway-processes"

    def __init__(self, sockets: Sequence[Sequence[socket.socket]], argv: Sequence[str], *, deadline: float,
                 env: Mapping[str, str] | None = None) -> None:
        self.sockets = [list(group) for group in sockets]
        self.count = len(self.sockets)
        self.deadline = deadline
        self._argv = list(argv)
        self._env = {**os.environ, **(env or {})}
        self._children: list[_Child] = []
        self._stopping = asyncio.Event()
        self._finished = asyncio.Event()

    @property
    def pids(self) -> list[int]:
        """The process ids of the current gateway processes, by slot."""
        return [child.pid for child in self._children]

    async def start(self) -> None:
        """Start every gateway process and return once each listens.

        :class:`StartFailed` if one exits first (the others are stopped); cancelled (a signal during start-up),
        every process started so far is stopped before the cancellation goes on.
        """
        try:
            for slot in range(self.count):
                self._children.append(await self._spawn(slot))
            waiting = {asyncio.create_task(child.ready()): child for child in self._children}
            try:
                while waiting:
                    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        child = waiting.pop(task)
                        if not task.result():
                            raise StartFailed(child.pid, await child.process.wait())
            finally:
                for task in waiting:
                    task.cancel()
        except BaseException:
            await self._end_all()
            raise
        log.info("gateway processes listening", extra={"processes": self.count, "pids": self.pids})

    async def run(self) -> None:
        """Replace every gateway process that exits, until :meth:`stop`; returns once all of them are gone."""
        watchers = [asyncio.create_task(self._watch(slot), name=f"gateway-process-{slot}")
                    for slot in range(len(self._children))]
        try:
            await asyncio.gather(*watchers)
        finally:
            for watcher in watchers:
                watcher.cancel()
            await self._end_all(grace=0)  # cancelled at the deadline: whatever still runs is killed
            self._finished.set()

    async def stop(self) -> None:
        """Close this process's copy of the sockets, SIGTERM every gateway process, wait for them to drain."""
        self._stopping.set()
        for group in self.sockets:
            for sock in group:
                sock.close()  # once the gateway processes have closed theirs too, new connections are refused
        for child in self._children:
            child.signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._finished.wait(), self.deadline)

    async def _spawn(self, slot: int) -> _Child:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        listening = [sock.fileno() for sock in self.sockets[slot]]
        try:
            argv = [*self._argv, "--listen-fds", ",".join(map(str, listening)), "--parent-fd", str(theirs.fileno())]
            process = await asyncio.create_subprocess_exec(
                *argv, env=self._env, stdin=subprocess.DEVNULL, pass_fds=(*listening, theirs.fileno()),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the gateway process has its copy; ours must not keep the pair open
        return _Child(process, ours, time.monotonic())

    async def _watch(self, slot: int) -> None:
        """Wait for the process of ``slot`` to exit and start another, after the backoff; until stopping."""
        quick_deaths = 0
        child: _Child | None = self._children[slot]
        while True:
            if child is not None:
                code = await child.process.wait()
                child.channel.close()
                if self._stopping.is_set():
                    return
                quick_deaths = quick_deaths + 1 if time.monotonic() - child.started < HEALTHY_AFTER_S else 1
                log.warning("gateway process exited; starting another", extra={
                    "pid": child.pid, "exit_code": code, "restart_in_s": restart_delay(quick_deaths)})
            else:
                quick_deaths += 1  # the last one could not even be started
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), restart_delay(quick_deaths))
                return
            try:
                child = await self._spawn(slot)
            except OSError as exc:  # out of processes or memory, for now: try again after the next backoff
                log.error("cannot start a gateway process", extra={"error": str(exc)})
                child = None
                continue
            self._children[slot] = child
            if self._stopping.is_set():
                child.signal(signal.SIGTERM)  # stop() ran while it was being started
            elif await child.ready():
                log.info("gateway process ready", extra={"pid": child.pid, "slot": slot})

    async def _end_all(self, grace: float | None = None) -> None:
        """SIGTERM every gateway process still running, wait ``grace`` s (default the deadline), then SIGKILL."""
        alive = [child for child in self._children if child.process.returncode is None]
        for child in alive:
            child.signal(signal.SIGTERM)
        waits = {asyncio.create_task(child.process.wait()): child for child in alive}
        if waits:
            _, late = await asyncio.wait(waits, timeout=self.deadline if grace is None else grace)
            for task in late:
                waits[task].signal(signal.SIGKILL)
            if late:
                await asyncio.wait(late, timeout=5)
        for child in self._children:
            child.channel.close()


def inherited_sockets(fds: Sequence[int]) -> list[socket.socket]:
    """The listening sockets a gateway process was handed by its supervisor, by descriptor number."""
    sockets = [socket.socket(fileno=fd) for fd in fds]
    for sock in sockets:
        sock.setblocking(False)
    return sockets


class ParentLink:
    """A gateway process's end of its supervisor's socket pair; a service.

    It says ``ready`` once ``listening`` is set, then ends (which stops the process, as SIGTERM does) when the
    pair reads end-of-file: the supervisor is gone.
    """

    name = "parent-link"

    def __init__(self, fd: int, listening: asyncio.Event) -> None:
        self._sock = socket.socket(fileno=fd)
        self._sock.setblocking(False)
        self._listening = listening
        self._stopped = asyncio.Event()

    async def run(self) -> None:
        """Say ``ready`` once listening; return when the supervisor is gone or :meth:`stop` is called."""
        stopped = asyncio.create_task(self._stopped.wait())
        steps = asyncio.create_task(self._talk())
        try:
            done, _ = await asyncio.wait([stopped, steps], return_when=asyncio.FIRST_COMPLETED)
            if steps in done:
                log.warning("the supervising process is gone; stopping")
        finally:
            stopped.cancel()
            steps.cancel()
            self._sock.close()

    async def stop(self) -> None:
        """End :meth:`run`."""
        self._stopped.set()

    async def _talk(self) -> None:
        loop = asyncio.get_running_loop()
        await self._listening.wait()
        with contextlib.suppress(OSError):
            await loop.sock_sendall(self._sock, READY)
            while await loop.sock_recv(self._sock, 64):
                pass  # the supervisor sends nothing; only the end of the pair matters


def gateway_argv(host: str, port: int) -> list[str]:
    """The command line of one gateway process (this interpreter, the ``hookgate`` CLI), up to its descriptors."""
    return [sys.executable, "-m", "hookgate.cli", "gateway", "--host", host, "--port", str(port)]
