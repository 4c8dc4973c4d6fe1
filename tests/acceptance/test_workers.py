"""``--workers N``: N gateway processes on one port, supervised, as real processes on a real socket.

Which process holds a connection is read from ``/proc`` (psutil: the process whose socket has the client's
address as its peer). The kernel spreads connections over the processes by a hash of their addresses, so
twenty connections reach both of two processes but once in half a million runs.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time

import psutil
import pytest

from hookgate import completion
from hookgate.cli import build_parser, main
from hookgate.context import Context
from tests import factories
from tests.acceptance.test_cli import hookgate
from tests.processes import Proc, Spawner

SPREAD = 20  # connections opened to see every process: all twenty to one of two is a 2**-19 chance
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: hooks.test\r\n\r\n"


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


def gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def holders(clients: list[socket.socket], pids: list[int]) -> list[int | None]:
    """For each client, the process among ``pids`` that accepted its connection (None while none has)."""
    peers = {tuple(conn.raddr): pid for pid in pids for conn in psutil.Process(pid).net_connections(kind="tcp")
             if conn.raddr}
    return [peers.get(client.getsockname()) for client in clients]


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


def claim_request(token: str, instance: str) -> bytes:
    """A runtime claim long-polling 20 s (nothing to claim: it waits until the gateway stops)."""
    body = json.dumps({"wait_s": 20, "instance": instance}).encode()
    return (f"POST /v1/runtime/claim HTTP/1.1\r\nHost: hooks.test\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def wait_banner(proc: Proc) -> None:
    """Until ``hookgate ready on`` is printed."""
    until(lambda: "hookgate ready on" in proc.output() or proc.popen.poll() is not None, 60, "ready banner")
    assert proc.popen.poll() is None, proc.output()


def health_checks(port: int) -> list[socket.socket]:
    """``SPREAD`` connections, each with a /healthz sent on it (all sent before any answer is read)."""
    return [send(port, HEALTH) for _ in range(SPREAD)]


def answered_by(clients: list[socket.socket], pids: list[int]) -> set[int | None]:
    """Read every answer (each must be 200), close the connections; the processes that held them."""
    try:
        assert [answer_status(client) for client in clients] == [200] * len(clients)
        return set(holders(clients, pids))
    finally:
        for client in clients:
            client.close()


async def test_gateway_workers_share_one_port_survive_a_killed_process_and_drain_on_sigterm(
        spawn: Spawner, ctx: Context):
    agent = await factories.pull_agent(await factories.world(ctx))
    proc = spawn.start("gateway", "--workers", "2", gateway=True, extra_env={"HOOKGATE_SHUTDOWN_DEADLINE": "5"})
    assert proc.port is not None
    wait_banner(proc)
    first, second = pids = children(proc)
    assert answered_by(health_checks(proc.port), pids) == {first, second}  # both accept on the one port

    # One is killed. Connections made before its replacement runs are all answered: by the other process,
    # or, those the kernel put in the dead one's queue (which the supervisor keeps open), by the replacement.
    psutil.Process(first).kill()
    until(lambda: gone(first), what="the killed process gone")
    waiting = health_checks(proc.port)
    third = until(lambda: [p for p in children(proc) if p not in pids], what="a replacement process")[0]
    pids = [second, third]
    assert answered_by(waiting, pids) == {second, third}
    assert re.search(r'"gateway process exited; starting another", "pid": \d+, "exit_code": -9', proc.output())

    # Long-polling claims held by both processes; SIGTERM to the supervisor ends them all (204), it exits 0.
    claims = [send(proc.port, claim_request(agent.runtime_token, f"i{n}")) for n in range(SPREAD)]
    try:
        held = until(lambda: None not in (found := holders(claims, pids)) and found, what="the claims accepted")
        assert set(held) == {second, third}
        started = time.monotonic()
        proc.signal(signal.SIGTERM)
        assert [answer_status(claim) for claim in claims] == [204] * SPREAD
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
    offered = completion.script(build_parser(), "bash")
    assert "--workers" in offered and "--listen-fds" not in offered and "--parent-fd" not in offered
