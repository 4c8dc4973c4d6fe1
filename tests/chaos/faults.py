"""Faults injected during a chaos run: SIGKILL of workers and schedulers, cut connections, a PostgreSQL restart.

Each kill is timed until every lease the dead process held (tasks it pushed or claimed, cron executions it
ran) has been released or taken over by a live process: that is its recovery time.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from dataclasses import dataclass, field

import asyncpg

from tests.chaos.cluster import Cluster

HELD_BY = """
SELECT (SELECT count(*) FROM agent_task WHERE status = 'running' AND holder_instance = $1)
     + (SELECT count(*) FROM sys_cron_executions WHERE status = 'RUNNING' AND runner_id = $1)
"""


@dataclass
class Kill:
    """One SIGKILL: which role, which process, what it held, how long until its leases were recovered."""

    role: str
    pid: int
    at: float
    held: int = 0
    recovered_s: float | None = None

    @property
    def holder(self) -> str:
        """The holder id the process wrote on its leases (``host:pid``)."""
        return f"{socket.gethostname()}:{self.pid}"


@dataclass
class Faults:
    """Injects faults every ``interval`` seconds (randomised) until stopped."""

    cluster: Cluster
    interval: tuple[float, float] = (2.0, 6.0)
    restart_postgres_at: float | None = None  # seconds into the run, if the database can restart
    rng: random.Random = field(default_factory=random.Random)
    kills: list[Kill] = field(default_factory=list)
    cuts: int = 0
    postgres_restarts: int = 0
    postgres_down_s: float = 0.0
    stopping: bool = False

    async def run(self) -> None:
        """Inject until ``stopping``; the PostgreSQL restart happens once, at its time."""
        start = time.monotonic()
        while not self.stopping:
            await asyncio.sleep(self.rng.uniform(*self.interval))
            if self.stopping:
                break
            due = self.restart_postgres_at
            if due is not None and not self.postgres_restarts and time.monotonic() - start >= due:
                await self._restart_postgres()
                continue
            await self.rng.choice([self._kill_worker, self._kill_worker, self._kill_scheduler, self._cut])()

    async def _kill_worker(self) -> None:
        await self._kill("worker")

    async def _kill_scheduler(self) -> None:
        await self._kill("scheduler")

    async def _kill(self, role: str) -> None:
        index = self.rng.randrange(len(self.cluster.roles[role]))
        proc = await asyncio.to_thread(self.cluster.kill, role, index)
        self.kills.append(Kill(role, proc.popen.pid, time.monotonic()))
        await asyncio.sleep(self.rng.uniform(0.2, 2.0))  # down a moment, as a supervisor would restart it
        await asyncio.to_thread(self.cluster.restart, role, index)

    async def _cut(self) -> None:
        """Drop every database connection and refuse new ones for a moment."""
        assert self.cluster.proxy is not None
        self.cuts += 1
        self.cluster.proxy.block(True)
        self.cluster.proxy.cut()
        await asyncio.sleep(self.rng.uniform(0.5, 2.0))
        self.cluster.proxy.block(False)

    async def _restart_postgres(self) -> None:
        started = time.monotonic()
        await asyncio.to_thread(self.cluster.db.restart, 2.0)
        self.postgres_down_s = time.monotonic() - started
        self.postgres_restarts += 1

    async def watch_recovery(self, dsn: str) -> None:
        """Time every kill until the dead process holds no lease any more (polls four times a second)."""
        conn: asyncpg.Connection | None = None
        try:
            while not self.stopping or any(k.recovered_s is None for k in self.kills):
                conn = await self._poll(conn, dsn)
                await asyncio.sleep(0.25)
        finally:
            if conn is not None:
                await conn.close(timeout=2)

    async def _poll(self, conn: asyncpg.Connection | None, dsn: str) -> asyncpg.Connection | None:
        """One look at what the killed processes still hold; returns the connection to reuse."""
        try:
            conn = conn if conn is not None and not conn.is_closed() else await asyncpg.connect(dsn)
            for kill in [k for k in self.kills if k.recovered_s is None]:
                held = int(await conn.fetchval(HELD_BY, kill.holder))
                kill.held = max(kill.held, held)
                if held == 0:
                    kill.recovered_s = time.monotonic() - kill.at
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError):
            # InternalClientError: the FATAL a stopping server sends to an idle session, found by the next query.
            if conn is not None:
                conn.terminate()
            return None  # the database is restarting
        return conn
