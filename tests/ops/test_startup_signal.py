"""A SIGTERM while a role is still starting stops it cleanly: exit 0, no traceback, nothing left running."""

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hookgate.embedded import EmbeddedPostgres, _cluster_processes
from tests.conftest import TEST_SECRET_KEY
from tests.processes import ROOT

pytestmark = pytest.mark.asyncio


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "hookgate.cli", *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, **env, "PYTHONPATH": str(ROOT), "HOOKGATE_LOG_LEVEL": "info"})


async def _wait(proc: subprocess.Popen[bytes], timeout: float) -> int:
    return await asyncio.to_thread(proc.wait, timeout)


async def test_sigterm_while_the_database_does_not_answer_yet_exits_cleanly(tmp_path):
    # A database that accepts the connection and never answers: start-up waits in its first connect.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    silent.setblocking(False)
    port = silent.getsockname()[1]
    log = tmp_path / "worker.log"
    env = {"HOOKGATE_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/postgres",
           "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY}
    proc = _start(["worker"], env, log)
    held = []
    try:
        loop = asyncio.get_running_loop()
        conn, _ = await asyncio.wait_for(loop.sock_accept(silent), 30)  # the process is inside its connect
        held.append(conn)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await _wait(proc, 10)
        output = log.read_text()
        assert code == 0, output  # the default action would end it with -15, its cleanup skipped
        assert time.monotonic() - started < 4  # at once, not after the 5 s connect timeout
        assert "Traceback" not in output and "stopped during start-up" in output
    finally:
        for c in held:
            c.close()
        silent.close()
        if proc.poll() is None:
            proc.kill()


async def test_sigterm_while_the_embedded_postgres_starts_leaves_no_server_running(tmp_path):
    data_dir = tmp_path / "data"
    pgdata = EmbeddedPostgres(data_dir).pgdata
    log = tmp_path / "serve.log"
    proc = _start(["worker"], {"HOOKGATE_DATA_DIR": str(data_dir)}, log)
    try:
        deadline = time.monotonic() + 60
        while not (pgdata / "postmaster.pid").exists():  # initdb done, the server is starting
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        code = await _wait(proc, 60)
        output = log.read_text()
        assert code == 0, output
        assert "Traceback" not in output and "stopped during start-up" in output
        assert _cluster_processes(pgdata) == [], "the embedded server outlived the process that started it"
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(Exception):
            for p in _cluster_processes(pgdata):
                p.kill()
