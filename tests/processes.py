"""Start ``hookgate`` roles as separate OS processes (the real CLI), for race and crash tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    """One running role process and where its output goes."""

    popen: subprocess.Popen[bytes]
    log: Path
    port: int | None = None

    @property
    def url(self) -> str:
        """Base URL of a gateway process."""
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        """Everything the process wrote so far (stdout and stderr)."""
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        """Send a signal (SIGKILL to simulate a crash, SIGTERM for a graceful stop)."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        """Wait for exit; returns the exit code."""
        return self.popen.wait(timeout)

    def wait_logged(self, text: str, timeout: float = 30) -> None:
        """Poll the output until it holds ``text`` (a role without HTTP says it runs only in its log)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.popen.poll() is not None:
                raise RuntimeError(f"process exited early:\n{self.output()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} not logged within {timeout}s:\n{self.output()}")
            time.sleep(0.05)

    def wait_ready(self, timeout: float = 30) -> None:
        """Poll /readyz until 200 (gateway roles only)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"process exited early:\n{self.output()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"not ready within {timeout}s:\n{self.output()}")


def stop_all(procs: Iterable[Proc | subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM every process (a graceful stop), then SIGKILL each one still running ``timeout`` s after."""
    popens = [proc.popen if isinstance(proc, Proc) else proc for proc in procs]
    for popen in popens:
        popen.terminate()  # nothing if it has exited
    for popen in popens:
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()


async def wait_listeners(conn: asyncpg.Connection, count: int, timeout: float = 60) -> None:
    """Until ``count`` sessions of ``conn``'s database LISTEN (the workers are up and can be woken)."""
    deadline = time.monotonic() + timeout
    while await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                              "AND query LIKE 'LISTEN%'") < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} workers listening after {timeout}s")
        await asyncio.sleep(0.05)


@dataclass
class Spawner:
    """Starts processes with a common environment and kills every one of them at teardown."""

    env: dict[str, str]
    log_dir: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, *args: str, extra_env: dict[str, str] | None = None, gateway: bool = False) -> Proc:
        """Run ``hookgate ARGS…``; with ``gateway=True`` a free port is picked and passed."""
        port = free_port() if gateway else None
        argv = [sys.executable, "-m", "hookgate.cli", *args]
        if port is not None:
            argv += ["--port", str(port)]
        log = self.log_dir / f"proc-{len(self.procs)}-{args[0]}.log"
        env = {**os.environ, **self.env, **(extra_env or {}), "PYTHONPATH": str(ROOT)}
        with log.open("wb") as handle:  # the child keeps its own copy of the descriptor
            popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
        proc = Proc(popen, log, port)
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        """SIGKILL whatever still runs."""
        for proc in self.procs:
            proc.signal(signal.SIGKILL)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
