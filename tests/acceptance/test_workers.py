"""``--workers N``: N gateway processes on one port, supervised, as real processes on a real socket.

Which process holds a connection is read from ``/proc`` (psutil: the process whose socket has the client's
address as its peer). To make a given process accept, the others are paused (SIGSTOP): the one socket's
queue is then served by the only process left running.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from collections.abc import Iterator

import psutil
import pytest

from hookgate.cli import build_parser, main
from hookgate.context import Context
from tests import factories
from tests.acceptance.test_cli import hookgate
from tests.processes import Proc, Spawner


def children(proc: Proc) -> list[int]:
    """The gateway processes of a supervising process, by pid."""
    return sorted(child.pid for child in psutil.Process(proc.popen.pid).children())


def until(check, timeout: float = 20.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll ``check`` every 20 ms until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.02)
    return found


def holder(client: socket.socket, pids: list[int]) -> int | None:
    """The process among ``pids`` that accepted ``client``'s connection (None while none has)."""
    mine = client.getsockname()
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.raddr and tuple(conn.raddr) == mine:
                return pid
    return None


def send(port: int, request: bytes) -> socket.socket:
    """A connection to the port with ``request`` sent on it."""
    client = socket.create_connection(("127.0.0.1", port), timeout=20)
    client.sendall(request)
    return client


def answer_status(client: socket.socket) -> int:
    """Read a response head from ``client``; its status code."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = client.recv(4096)
        assert chunk, f"connection closed without an answer: {head!r}"
        head += chunk
    return int(head.split(b" ", 2)[1])


HEALTH = b"GET /healthz HTTP/1.1\r\nHost: hooks.test\r\n\r\n"


@pytest.fixture
def paused() -> Iterator[set[int]]:
    """Pids paused by a test: resumed at the end whatever happens (else nothing could kill them cleanly)."""
    stopped: set[int] = set()
    yield stopped
    resume_all(stopped)


def with_gone(action) -> None:  # type: ignore[no-untyped-def]
    """Run ``action``, ignoring a process that is already gone."""
    try:
        action()
    except psutil.NoSuchProcess:
        pass


def only_running(pid: int, pids: list[int], paused: set[int]) -> None:
    """Pause every process of ``pids`` but ``pid``; resume ``pid`` if it was paused."""
    for other in pids:
        if other == pid and other in paused:
            psutil.Process(other).resume()
            paused.discard(other)
        elif other != pid and other not in paused:
            psutil.Process(other).suspend()
            paused.add(other)


def resume_all(paused: set[int]) -> None:
    """Let every paused process run again."""
    for pid in paused:
        with_gone(lambda pid=pid: psutil.Process(pid).resume())
    paused.clear()


def served_by(port: int, pid: int, pids: list[int], paused: set[int]) -> socket.socket:
    """Send /healthz with only ``pid`` running; assert it answered 200 and holds the connection."""
    only_running(pid, pids, paused)
    client = send(port, HEALTH)
    try:
        assert answer_status(client) == 200
        assert holder(client, pids) == pid
    except BaseException:
        client.close()
        raise
    return client


def claim_request(token: str, instance: str) -> bytes:
    """A runtime claim long-polling 20 s (nothing to claim: it waits until the gateway stops)."""
    body = json.dumps({"wait_s": 20, "instance": instance}).encode()
    return (f"POST /v1/runtime/claim HTTP/1.1\r\nHost: hooks.test\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def wait_banner(proc: Proc) -> None:
    """Until ``hookgate ready on`` is printed; it must be printed once."""
    until(lambda: "hookgate ready on" in proc.output() or proc.popen.poll() is not None, 60, "ready banner")
    assert proc.popen.poll() is None, proc.output()


async def test_gateway_workers_share_one_port_survive_a_killed_process_and_drain_on_sigterm(
        spawn: Spawner, ctx: Context, paused: set[int]):
    agent = await factories.pull_agent(await factories.world(ctx))
    proc = spawn.start("gateway", "--workers", "2", gateway=True, extra_env={"HOOKGATE_SHUTDOWN_DEADLINE": "5"})
    assert proc.port is not None
    wait_banner(proc)
    first, second = pids = children(proc)

    # Both processes accept on the one port.
    for pid in pids:
        served_by(proc.port, pid, pids, paused).close()
    resume_all(paused)

    # One is killed: the port still answers, through the other, and a new process takes the dead one's place.
    psutil.Process(first).kill()
    served_by(proc.port, second, [second], paused).close()
    third = until(lambda: [p for p in children(proc) if p not in pids], what="a replacement process")[0]
    pids = [second, third]
    served_by(proc.port, third, pids, paused).close()  # waits in the queue until the new process serves
    assert re.search(r'"gateway process exited; starting another", "pid": \d+, "exit_code": -9', proc.output())

    # Each process holds a long-polling claim; SIGTERM to the supervisor ends both (204) and it exits 0.
    claims = []
    for n, pid in enumerate(pids):
        only_running(pid, pids, paused)
        claim = send(proc.port, claim_request(agent.runtime_token, f"i{n}"))
        until(lambda claim=claim: holder(claim, pids), what="the claim accepted")
        claims.append(claim)
    resume_all(paused)
    started = time.monotonic()
    proc.signal(signal.SIGTERM)
    try:
        assert [answer_status(claim) for claim in claims] == [204, 204]
    finally:
        for claim in claims:
            claim.close()
    assert proc.wait(15) == 0, proc.output()
    assert time.monotonic() - started < 4  # the drain ended the claims at once; nothing waited for the deadline
    assert not [pid for pid in pids if psutil.pid_exists(pid)], "a gateway process outlived its supervisor"
    output = proc.output()
    assert output.count("hookgate ready on") == 1
    for pid in pids:
        assert f"Finished server process [{pid}]" in output  # drained through uvicorn's shutdown, not killed
    assert "Traceback" not in output


def test_serve_workers_runs_gateway_processes_beside_its_worker_and_scheduler(spawn: Spawner):
    proc = spawn.start("serve", "--workers", "2", gateway=True)
    wait_banner(proc)
    pids = children(proc)
    assert len(pids) == 2
    for pid in pids:
        assert "gateway" in psutil.Process(pid).cmdline()
    client = send(proc.port or 0, b"GET /readyz HTTP/1.1\r\nHost: hooks.test\r\n\r\n")
    assert answer_status(client) == 200
    client.close()
    proc.signal(signal.SIGTERM)
    assert proc.wait(15) == 0, proc.output()
    output = proc.output()
    assert output.count("hookgate ready on") == 1 and "Traceback" not in output
    assert not [pid for pid in pids if psutil.pid_exists(pid)]


def test_a_bad_workers_value_is_one_error_line_and_exit_2():
    out = hookgate("gateway", "--workers", "0", env={}, timeout=30)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "hookgate: error: argument --workers: must be a whole number from 1 to 256, not '0' "
        "(see 'hookgate gateway --help')"]


@pytest.mark.parametrize(("role", "value"), [("gateway", "two"), ("serve", "-1"), ("serve", "257"), ("serve", "")])
def test_every_bad_workers_value_is_refused_the_same_way(role, value, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([role, "--workers", value])  # in process: the same parser, without starting an interpreter
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"hookgate: error: argument --workers: must be a whole number from 1 to 256, not '{value}' "
        f"(see 'hookgate {role} --help')"]


def test_a_bad_workers_setting_is_one_error_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("HOOKGATE_GATEWAY_WORKERS", "0")
    with pytest.raises(SystemExit) as exit_:
        main(["gateway"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hookgate: error: HOOKGATE_GATEWAY_WORKERS:"), lines


def test_help_names_workers_and_hides_how_gateway_processes_are_started(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["gateway", "--help"])
    shown = capsys.readouterr().out
    assert "--workers N" in shown and "HOOKGATE_GATEWAY_WORKERS" in shown
    assert "--listen-fds" not in shown and "--parent-fd" not in shown
