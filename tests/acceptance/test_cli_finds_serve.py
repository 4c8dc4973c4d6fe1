"""The client commands find the gateway ``serve`` started: ``<data dir>/cli.json``, and the banner's export line.

``serve --port P`` then ``hookgate runs list`` in the same directory reaches port P with no ``HOOKGATE_URL``.
Precedence: ``--url``, then ``HOOKGATE_URL`` (and ``HOOKGATE_HOST``/``HOOKGATE_PORT``), then the file, then the
default. A clean stop removes the file; one left by a killed ``serve`` is named when its address does not answer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from tests.acceptance.cli import ARGV, cli_env
from tests.processes import Proc, Spawner, free_port


def _serve(spawn: Spawner, cwd: Path, port: int) -> Proc:
    """``hookgate serve --port PORT`` started in ``cwd`` (its data dir: ``./.hookgate``), stdout a log file."""
    env = cli_env({k: v for k, v in spawn.env.items() if k != "HOOKGATE_DATA_DIR"})
    log = cwd / "serve.log"
    with log.open("wb") as out:
        popen = subprocess.Popen([*ARGV, "serve", "--port", str(port)], cwd=cwd, env=env, stdout=out,
                                 stderr=subprocess.STDOUT)
    proc = Proc(popen, log, port)
    spawn.procs.append(proc)  # killed at teardown whatever happens
    return proc


def _client(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``hookgate ARGS…`` run in ``cwd`` with only ``env`` as HOOKGATE_ settings."""
    return subprocess.run([*ARGV, *args], cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=60)


def test_the_cli_reaches_the_port_serve_was_started_on_without_any_setting(spawn: Spawner, tmp_path: Path):
    port = free_port()
    serve = _serve(spawn, tmp_path, port)
    serve.wait_ready(60)
    data = tmp_path / ".hookgate"
    url = f"http://127.0.0.1:{port}"
    printed = serve.output()
    assert f"export HOOKGATE_URL={url}" in printed, printed
    assert f"{url}/dashboard" in printed, printed  # the first start names the dashboard without a terminal too
    written = data / "cli.json"
    assert json.loads(written.read_text()) == {"url": url, "dashboard": f"{url}/dashboard", "pid": serve.popen.pid}
    assert written.stat().st_mode & 0o777 == 0o600 and "hgk_" not in written.read_text()
    key = (data / "first-owner-key").read_text().strip()

    listed = _client(tmp_path, "runs", "list", "--json", HOOKGATE_API_KEY=key)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"items": [], "next_cursor": None} and listed.stderr == ""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    me = _client(elsewhere, "me", "--json", HOOKGATE_API_KEY=key, HOOKGATE_DATA_DIR=str(data))
    assert me.returncode == 0 and json.loads(me.stdout)["role"] == "owner", me.stderr

    # The flag beats the environment, which beats the file.
    dead = f"http://127.0.0.1:{free_port()}"
    flag = _client(tmp_path, "runs", "list", "--url", dead, HOOKGATE_API_KEY=key, HOOKGATE_URL=url)
    assert flag.returncode == 2 and f"cannot reach {dead}" in flag.stderr, flag.stderr
    env = _client(tmp_path, "runs", "list", HOOKGATE_API_KEY=key, HOOKGATE_URL=dead)
    assert env.returncode == 2 and f"cannot reach {dead}" in env.stderr, env.stderr
    other_port = _client(tmp_path, "runs", "list", HOOKGATE_API_KEY=key, HOOKGATE_PORT=dead.rsplit(":", 1)[1])
    assert other_port.returncode == 2 and f"cannot reach {dead}" in other_port.stderr, other_port.stderr

    serve.signal(signal.SIGTERM)
    assert serve.wait(30) == 0
    assert not written.exists()  # a clean stop takes its address back
    gone = _client(tmp_path, "runs", "list", HOOKGATE_API_KEY=key)  # back to the default (something may be there)
    assert gone.returncode in (1, 2) and f":{port}" not in gone.stderr and "cli.json" not in gone.stderr


def test_a_file_left_by_a_killed_serve_is_named_when_its_address_does_not_answer(spawn: Spawner, tmp_path: Path):
    port = free_port()
    serve = _serve(spawn, tmp_path, port)
    serve.wait_ready(60)
    serve.signal(signal.SIGKILL)
    serve.wait(30)
    written = tmp_path / ".hookgate" / "cli.json"
    assert written.exists()
    stale = _client(tmp_path, "runs", "list", HOOKGATE_API_KEY="hgk_whatever")
    assert stale.returncode == 2 and len(stale.stderr.splitlines()) == 1, stale.stderr
    assert f"cannot reach http://127.0.0.1:{port}" in stale.stderr and str(Path(".hookgate") / "cli.json") in (
        stale.stderr), stale.stderr
    assert "is hookgate serve still running" in stale.stderr

    again = _serve(spawn, tmp_path, free_port())  # the next start replaces the stale file
    again.wait_ready(60)
    assert json.loads(written.read_text())["url"] == f"http://127.0.0.1:{again.port}"
    assert "dashboard" in again.output() and f"export HOOKGATE_URL=http://127.0.0.1:{again.port}" in again.output()


def test_a_broken_cli_file_is_ignored(tmp_path: Path):
    data = tmp_path / ".hookgate"
    data.mkdir()
    (data / "cli.json").write_text("{not json")
    done = _client(tmp_path, "runs", "list", HOOKGATE_API_KEY="hgk_whatever", HOOKGATE_PORT=str(free_port()))
    assert done.returncode == 2 and "cannot reach" in done.stderr and "Traceback" not in done.stderr
    done = _client(tmp_path, "runs", "list", HOOKGATE_API_KEY="hgk_whatever")  # the default: may be anything
    assert done.returncode in (1, 2) and "cli.json" not in done.stderr and "Traceback" not in done.stderr
    assert os.path.exists(data / "cli.json")  # a client never removes it: only the serve that wrote it does
