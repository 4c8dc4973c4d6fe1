"""A real PgBouncer (Debian's ``pgbouncer``) in transaction mode in front of a test PostgreSQL.

``PgBouncer.start(server_url)`` writes its own ``pgbouncer.ini`` and user list in a temp dir, starts the
binary in the foreground on a free loopback port and waits until it answers; ``url(db_url)`` is the same
database through it; ``stop()`` ends it (SIGTERM, then SIGKILL) and removes the temp dir. Every database of
the server is reachable through it (the ``*`` fallback entry); ``databases`` adds named entries with options
(``connect_query``, another ``dbname``). PgBouncer refuses to run as root: as root it runs as the owner of
the server's unix socket directory (the embedded server), else as ``nobody``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

from tests.processes import free_port

BINARY = "pgbouncer"
#: Server connections per (database, user) pool: small, so that client connections really share them.
POOL_SIZE = 10


def binary() -> str:
    """The ``pgbouncer`` binary; an assertion error naming the package when it is not installed."""
    found = shutil.which(BINARY) or next((p for p in ("/usr/sbin/pgbouncer",) if os.path.exists(p)), None)
    assert found, "no pgbouncer binary: apt-get install -y pgbouncer (CI installs it)"
    return found


def _target(server_url: str) -> tuple[str, int, str, str]:
    """(host or unix socket dir, port, user, password) of a libpq-style URL, as asyncpg reads it."""
    parts = urlsplit(server_url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = parts.hostname or query.get("host") or "127.0.0.1"
    port = parts.port or int(query.get("port", "5432"))
    return host, port, unquote(parts.username or "postgres"), unquote(parts.password or "")


@dataclass
class PgBouncer:
    """One PgBouncer process in front of one PostgreSQL server."""

    server_url: str
    pool_mode: str = "transaction"
    pool_size: int = POOL_SIZE
    #: Extra ``[databases]`` entries: name -> libpq-style options (host and port are added).
    databases: dict[str, str] = field(default_factory=dict)
    port: int = 0
    work: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, server_url: str, **options: object) -> PgBouncer:
        """Write the configuration, start PgBouncer and wait until it lets a client in.

        A start that fails (no binary, not listening in time) leaves no process and no directory behind.
        """
        bouncer = cls(server_url, **options)  # type: ignore[arg-type]
        try:
            bouncer._start()
        except BaseException:
            bouncer.stop()
            raise
        return bouncer

    @property
    def ini(self) -> Path:
        """The configuration file."""
        assert self.work is not None
        return self.work / "pgbouncer.ini"

    @property
    def log(self) -> Path:
        """Everything PgBouncer printed (its log goes to stderr)."""
        assert self.work is not None
        return self.work / "pgbouncer.log"

    def url(self, db_url: str) -> str:
        """``db_url``'s database (or a ``databases`` entry's name), with the server's user, through PgBouncer."""
        parts = urlsplit(db_url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items() if k not in ("host", "port")}
        netloc = f"{parts.username or 'postgres'}{':' + parts.password if parts.password else ''}"
        return urlunsplit(("postgresql", f"{netloc}@127.0.0.1:{self.port}", parts.path, urlencode(query), ""))

    def named(self, name: str) -> str:
        """The URL of a ``databases`` entry."""
        return self.url(urlsplit(self.server_url)._replace(path=f"/{name}").geturl())

    def output(self) -> str:
        """PgBouncer's log so far."""
        return self.log.read_text(errors="replace") if self.work is not None and self.log.exists() else ""

    def stop(self) -> None:
        """End the process (SIGTERM, SIGKILL after 10 s) and remove its directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None

    def _start(self) -> None:
        host, port, user, password = _target(self.server_url)
        self.work = Path(tempfile.mkdtemp(prefix="hookgate-pgbouncer-"))
        self.port = free_port()
        server = f"host={host} port={port}"
        entries = [f"{name} = {server} {options}" for name, options in self.databases.items()]
        self.ini.write_text("\n".join([
            "[databases]", *entries, f"* = {server}", "",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1", f"listen_port = {self.port}", "unix_socket_dir =",
            "auth_type = trust", f"auth_file = {self.work / 'userlist.txt'}", f"admin_users = {user}",
            f"pool_mode = {self.pool_mode}", f"default_pool_size = {self.pool_size}", "max_client_conn = 2000",
            # A restarted server is logged into again after 1 s (default 15 s); a client waits at most 30 s
            # for a server connection (default 120 s).
            "server_login_retry = 1", "query_wait_timeout = 30",
            "log_connections = 0", "log_disconnections = 0", "stats_period = 3600", "",
        ]))
        (self.work / "userlist.txt").write_text(f'"{user}" "{password}"\n')
        argv = [binary(), str(self.ini)]
        if os.geteuid() == 0:  # PgBouncer will not run as root
            owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "nobody"
            owner_ids = pwd.getpwnam(owner)
            for path in (self.work, *self.work.iterdir()):
                os.chown(path, owner_ids.pw_uid, owner_ids.pw_gid)
            argv[1:1] = ["-u", owner]
        with self.log.open("wb") as handle:
            self.proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=self.work)
        self._wait_listening()

    def _wait_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited ({self.proc.returncode}):\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"pgbouncer not listening within {timeout}s")
