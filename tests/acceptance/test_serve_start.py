"""Starting ``gateway`` and ``serve`` as real processes: a taken port, and when "ready" is printed.

A taken port is one error line; "ready" is printed only once the port is bound (and it answers at that moment).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.processes import Spawner


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port some other program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("role", ["gateway", "serve", "gateway --workers 2"])
def test_a_taken_port_is_one_error_line_and_no_ready_banner(role, spawn: Spawner, taken_port, tmp_path):
    proc = spawn.start(*role.split(), "--port", str(taken_port),
                       extra_env={"HOOKGATE_DATA_DIR": str(tmp_path / "data")})
    assert proc.wait(60) == 2
    lines = proc.output().splitlines()
    errors = [line for line in lines if line.startswith("hookgate: error:")]
    assert errors == [f"hookgate: error: cannot listen on 127.0.0.1:{taken_port}: address already in use"], lines
    assert not any("Traceback" in line or "hookgate ready" in line or "uvicorn" in line for line in lines), lines
    # serve bootstraps the first workspace only once bound: no owner key was made that nobody saw.
    assert not (tmp_path / "data" / "first-owner-key").exists()


def test_ready_is_printed_once_the_port_is_bound_and_names_the_real_port(spawn: Spawner):
    proc = spawn.start("gateway", "--port", "0")
    deadline = time.monotonic() + 60
    while not (found := re.search(r"hookgate ready on (http://127\.0\.0\.1:(\d+))", proc.output())):
        assert proc.popen.poll() is None and time.monotonic() < deadline, proc.output()
        time.sleep(0.02)
    assert found.group(2) != "0"
    answer = httpx.get(found.group(1) + "/readyz", timeout=10)  # no retry: bound means it answers
    assert answer.status_code == 200
