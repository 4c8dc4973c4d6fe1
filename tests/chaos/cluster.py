"""The processes under test: one PostgreSQL, a TCP proxy in front of it, and hookgate role processes behind it.

Every role reaches the database through the proxy, so the chaos run can cut connections; the checks use a
direct DSN. With the embedded PostgreSQL (default) the server itself can be restarted. With ``pooler`` the
roles' pools go through a real PgBouncer in transaction mode in front of the proxy (``tests/pooler.py``), their
LISTEN, liveness locks and migrations through the proxy alone (``HOOKGATE_DIRECT_DATABASE_URL``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from hookgate import embedded
from hookgate.embedded import EmbeddedPostgres
from tests import databases
from tests.chaos.proxy import TcpProxy
from tests.pooler import PgBouncer
from tests.processes import ROOT, Proc, Spawner, free_port, stop_all

SECRET_KEY = base64.b64encode(b"chaos-secret-key-of-32-bytes-ok!").decode()

# Short leases and timeouts so that every recovery fits a run of a minute or two (DISPATCH.md settings). The
# heartbeat timeout is the exception kept longer than the rest: a pull runtime can record no heartbeat while
# PostgreSQL restarts, and once the restart and the processes' reconnection took longer than the timeout, the
# standard preset's runs were skipped as runtime_offline, rightly so (CI saw 7 with 6 s on a loaded machine, and 5
# with 20 s on a slower host running benchmarks beside it, where the runtimes' claims, which heartbeat, were
# presumably starved). Skips counted before the first heartbeat are a different cause: runs admitted before any
# runtime's first claim (13 once, with 60 s, under pytest -n auto), which the run now waits for before its load.
FAST_RECOVERY = {
    "HOOKGATE_DELIVERY_LEASE_S": "5", "HOOKGATE_RUN_REPAIR_AFTER_S": "3", "HOOKGATE_TASK_LEASE_S": "6",
    "HOOKGATE_PUSH_LEASE_MARGIN_S": "2", "HOOKGATE_HEARTBEAT_TIMEOUT_S": "60", "HOOKGATE_WATCHDOG_INTERVAL_S": "1",
    "HOOKGATE_PUSH_RETRY_SCHEDULE": "0.2,0.4,0.8,1.6,2,2,2,2,2",
    # The circuit breaker: 5 failed pushes in a row open it; probes 0.5 s apart, doubling up to 2 s.
    "HOOKGATE_AGENT_TRIP_AFTER": "5", "HOOKGATE_AGENT_PROBE_MIN_S": "0.5", "HOOKGATE_AGENT_PROBE_MAX_S": "2",
    "HOOKGATE_DELIVERY_MAX_ATTEMPTS": "20", "HOOKGATE_DELIVERY_BACKOFF_BASE_S": "0.2",
    "HOOKGATE_DELIVERY_BACKOFF_CAP_S": "2",
    "HOOKGATE_SCHEDULER_MAX_TICK_S": "2", "HOOKGATE_POOL_MIN_SIZE": "1", "HOOKGATE_POOL_MAX_SIZE": "8",
    # The load comes from one IP: lift the per-IP gates (they are tested on their own in tests/security).
    "HOOKGATE_IP_REQUEST_CAP": "100000000", "HOOKGATE_IP_BAD_CREDENTIAL_CAP": "100000000",
    "HOOKGATE_LOG_LEVEL": "warning",
}


class Database:
    """One PostgreSQL: the embedded one in a temp dir (restartable), or a database on ``server_url``."""

    def __init__(self, server_url: str | None, work: Path) -> None:
        self.server_url = server_url or ""
        self.embedded = None if server_url else EmbeddedPostgres(work / "pg")
        self.name = f"hookgate_chaos_{uuid.uuid4().hex[:8]}"
        #: As root, an embedded server's cluster lives under /var/lib/hookgate, not in ``work``: the ones there
        #: before the run, so that :meth:`drop` removes the one it made.
        self.clusters_before = embedded.shared_clusters()

    @property
    def restartable(self) -> bool:
        """Only the embedded server can be stopped and started by the run."""
        return self.embedded is not None

    def start(self) -> str:
        """Start (embedded) and create the run's database; returns its direct DSN."""
        if self.embedded is not None:
            self.embedded.start()
            return self.embedded.ensure_database(self.name)
        return asyncio.run(databases.create(self.server_url, self.name))

    def target(self) -> tuple[str, int]:
        """Where the proxy forwards: a unix socket dir (embedded) or host and port."""
        if self.embedded is not None:
            sock, port = self.embedded._started_socket()
            return str(sock), port
        parts = urlsplit(self.server_url)
        return parts.hostname or "127.0.0.1", parts.port or 5432

    def restart(self, down_s: float) -> None:
        """Stop the server, stay down ``down_s`` seconds, start it again."""
        assert self.embedded is not None
        self.embedded.stop()
        time.sleep(down_s)
        self.embedded.start()

    def close(self) -> None:
        """Stop the embedded server (an external server's database is left for inspection)."""
        if self.embedded is not None:
            self.embedded.stop()

    def drop(self) -> None:
        """After :meth:`close`: drop the run's database.

        On an external server, the database; embedded, as root, the cluster the run made under /var/lib/hookgate
        (its data dir goes with the work dir).
        """
        if self.embedded is None:
            asyncio.run(databases.drop(self.server_url, self.name))
        else:
            embedded.prune_orphan_clusters(embedded.shared_clusters() - self.clusters_before,
                                           under=self.embedded.data_dir)


@dataclass
class Cluster:
    """The database, the proxy and the role processes, by role, restartable one by one."""

    db: Database
    work: Path
    roles: dict[str, list[Proc]] = field(default_factory=dict)
    dsn: str = ""
    proxy: TcpProxy | None = None
    spawner: Spawner | None = None
    pooler: bool = False
    bouncer: PgBouncer | None = None

    @classmethod
    def create(cls, server_url: str | None, *, pooler: bool = False) -> Cluster:
        """A fresh temp work dir and database; with ``pooler``, a PgBouncer in front of the proxy."""
        work = Path(tempfile.mkdtemp(prefix="hookgate-chaos-"))
        return cls(Database(server_url, work), work, pooler=pooler)

    def start(self, gateways: int, workers: int, schedulers: int) -> None:
        """Database, migrations, proxy, then every role process (gateways ready)."""
        self.dsn = self.db.start()
        self.proxy = TcpProxy(*self.db.target())
        port = self.proxy.start()
        proxied = f"postgresql://postgres@127.0.0.1:{port}/{self.db.name}"
        # The chaos agents are local servers: loopback is allowed explicitly, as an operator would.
        env = {**FAST_RECOVERY, "HOOKGATE_SECRET_KEY": SECRET_KEY, "HOOKGATE_AGENT_ALLOW_CIDRS": "127.0.0.0/8,::1/128",
               "HOOKGATE_DATABASE_URL": proxied}
        if self.pooler:
            self.bouncer = PgBouncer.start(proxied)
            env |= {"HOOKGATE_DATABASE_URL": self.bouncer.url(proxied), "HOOKGATE_DIRECT_DATABASE_URL": proxied}
        self.spawner = Spawner(env, self.work)
        self.cli("migrate")
        for _ in range(gateways):
            self.roles.setdefault("gateway", []).append(self._start("gateway"))
        for gateway in self.roles["gateway"]:
            gateway.wait_ready(60)
        for role, count in (("worker", workers), ("scheduler", schedulers)):
            self.roles[role] = [self._start(role) for _ in range(count)]

    def _start(self, role: str) -> Proc:
        assert self.spawner is not None
        if role != "gateway":
            return self.spawner.start(role)
        # The public URL (report_url of pushes) must name the gateway's own port: pick it first.
        chosen = free_port()
        proc = self.spawner.start("gateway", "--port", str(chosen),
                                  extra_env={"HOOKGATE_PUBLIC_URL": f"http://127.0.0.1:{chosen}"})
        proc.port = chosen
        return proc

    def cli(self, *args: str) -> str:
        """Run ``hookgate ARGS`` to completion (through the proxy); returns stdout."""
        assert self.spawner is not None
        env = {**os.environ, **self.spawner.env, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "hookgate.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=True)
        return done.stdout

    def bootstrap(self) -> dict[str, str]:
        """``hookgate bootstrap --json``: the workspace and its owner key."""
        return dict(json.loads(self.cli("bootstrap", "--workspace", "chaos", "--json")))

    def kill(self, role: str, index: int) -> Proc:
        """SIGKILL one process of ``role``; returns it (dead)."""
        proc = self.roles[role][index]
        proc.signal(signal.SIGKILL)
        proc.wait(10)
        return proc

    def restart(self, role: str, index: int) -> None:
        """Start a new process in the slot of a killed one."""
        self.roles[role][index] = self._start(role)

    def alive(self) -> dict[str, int]:
        """Running processes per role."""
        return {role: sum(p.popen.poll() is None for p in procs) for role, procs in self.roles.items()}

    def gateway_urls(self) -> list[str]:
        """Base URLs of the gateways."""
        return [p.url for p in self.roles["gateway"]]

    def stop(self) -> None:
        """SIGTERM every role (graceful), SIGKILL stragglers, stop the proxy and the database."""
        stop_all([p for group in self.roles.values() for p in group], 30)
        if self.spawner is not None:
            self.spawner.kill_all()
        if self.bouncer is not None:
            self.bouncer.stop()
        if self.proxy is not None:
            self.proxy.stop()
        self.db.close()

    def remove(self) -> None:
        """After :meth:`stop`: drop the database and delete the work dir (its logs, an embedded cluster's data)."""
        self.db.drop()
        shutil.rmtree(self.work, ignore_errors=True)
