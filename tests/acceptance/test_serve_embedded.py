"""``hookgate serve`` with no database URL: embedded PostgreSQL, first-run bootstrap, crash recovery."""

import signal
import subprocess
import time

import psutil

from tests.acceptance.cli import ARGV, cli_env, hookgate_json
from tests.processes import ROOT, Proc, free_port


def _postgres_for(data_dir) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if proc.info["name"] == "postgres" and "-D" in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
            marker = (data_dir / "pg" / "cluster").read_text().strip() if (data_dir / "pg" / "cluster").exists() \
                else str(data_dir)
            if marker in cmdline:
                found.append(proc)
    return found


def _serve(data_dir, port, log):
    env = cli_env({"HOOKGATE_DATA_DIR": str(data_dir), "HOOKGATE_PORT": str(port)})
    return subprocess.Popen([*ARGV, "serve"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def _wait_gone(data_dir, timeout=20):
    deadline = time.monotonic() + timeout
    while _postgres_for(data_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _postgres_for(data_dir)


def test_serve_runs_on_embedded_postgres_survives_sigkill_and_leaves_no_orphan(tmp_path):
    data_dir, port = tmp_path / "data", free_port()
    with open(tmp_path / "serve.log", "wb") as log:
        first = _serve(data_dir, port, log)
        Proc(first, tmp_path / "serve.log", port).wait_ready(60)
    printed = (tmp_path / "serve.log").read_text()
    # Not a terminal: the first run files the owner key (0600) and prints only where it is.
    key_file = data_dir / "first-owner-key"
    assert str(key_file) in printed and "hgk_" not in printed, printed
    assert key_file.read_text().startswith("hgk_") and key_file.stat().st_mode & 0o777 == 0o600
    assert "HOOKGATE_AGENT_ALLOW_CIDRS" in printed, printed  # loopback agents are allowed here, and it says so
    assert (data_dir / "secret.key").stat().st_mode & 0o777 == 0o600
    first_key = key_file.read_text()

    first.send_signal(signal.SIGKILL)
    first.wait(10)
    with open(tmp_path / "serve2.log", "wb") as log:
        second = _serve(data_dir, port, log)
        Proc(second, tmp_path / "serve2.log", port).wait_ready(60)
        boot = hookgate_json("bootstrap", env={"HOOKGATE_DATA_DIR": str(data_dir)})
        assert boot["api_key"].startswith("hgk_")
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    assert "hgk_" not in (tmp_path / "serve2.log").read_text()
    assert key_file.read_text() == first_key  # only the first run makes a key
    assert _wait_gone(data_dir) == [], "embedded PostgreSQL left running after serve exited"
