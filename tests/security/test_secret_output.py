"""Where secrets may appear: the first owner key on a terminal only, never in a log line.

``hookgate serve`` prints the first owner key only when stdout is a terminal; otherwise the key goes to
``<data dir>/first-owner-key`` (mode 0600 from its creation, whatever the umask) and only the path is
written out. Runtime tokens (``hgr_…``) and agent signing secrets (``whsec_…``) stay out of the JSON logs
of a gateway and a worker at debug level: agent creation, a signed push to a real local agent, runtime
calls with good and bad tokens, and an exception logged with its arguments.
"""

from __future__ import annotations

import json
import logging
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from hookgate import logs
from tests import factories
from tests.processes import ROOT, Proc, Spawner, free_port
from tests.servers import QuietHandler, serving_thread

# -- the first owner key ----------------------------------------------------------------------------------


def _serve(spawn: Spawner, data_dir: Path, port: int, stdout: int, stderr: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, **spawn.env, "HOOKGATE_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    # umask 0: the key file's mode must come from how it is created, not from a friendly umask.
    return subprocess.Popen([sys.executable, "-m", "hookgate.cli", "serve", "--port", str(port)], cwd=ROOT,
                            env=env, stdout=stdout, stderr=stderr, umask=0)


@pytest.fixture
def stopper() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_serve_without_a_terminal_files_the_first_key_0600_and_prints_only_its_path(spawn, tmp_path, stopper):
    data_dir, port, log = tmp_path / "data", free_port(), tmp_path / "serve.log"
    with log.open("wb") as out:
        stopper.append(proc := _serve(spawn, data_dir, port, out.fileno(), subprocess.STDOUT))
    Proc(proc, log, port).wait_ready(60)
    key_file = data_dir / "first-owner-key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text().strip()
    assert key.startswith("hgk_")
    me = httpx.get(f"http://127.0.0.1:{port}/v1/me", headers={"authorization": f"Bearer {key}"}, timeout=10)
    assert me.status_code == 200, me.text
    printed = log.read_text()
    assert str(key_file) in printed, printed
    assert key not in printed and key[4:16] not in printed and "hgk_" not in printed, printed
    assert [p.name for p in data_dir.iterdir() if "first-owner-key" in p.name] == ["first-owner-key"]


def test_bootstrap_json_still_prints_a_key_to_a_pipe(spawn, tmp_path):
    env = {**os.environ, **spawn.env, "HOOKGATE_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "hookgate.cli", "bootstrap", "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["api_key"].startswith("hgk_")
    assert not (tmp_path / "data" / "first-owner-key").exists()


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return seen


def test_serve_on_a_terminal_prints_the_first_key_there_and_files_nothing(spawn, tmp_path, stopper):
    data_dir, port, log = tmp_path / "data", free_port(), tmp_path / "stderr.log"
    main, terminal = pty.openpty()
    try:
        with log.open("wb") as err:
            stopper.append(proc := _serve(spawn, data_dir, port, terminal, err.fileno()))
        Proc(proc, log, port).wait_ready(60)
        shown = _read_until(main, b"/v1/me", 30).decode(errors="replace")
    finally:
        os.close(terminal)
        os.close(main)
    key = next(word for word in shown.split() if word.startswith("hgk_"))
    me = httpx.get(f"http://127.0.0.1:{port}/v1/me", headers={"authorization": f"Bearer {key}"}, timeout=10)
    assert me.status_code == 200, me.text
    assert not (data_dir / "first-owner-key").exists()
    assert key not in log.read_text()


# -- runtime tokens and agent signing secrets in the logs --------------------------------------------------


class _Agent(QuietHandler):
    """A real local push agent: records each request's headers and answers 200."""

    seen: list[dict[str, str]]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).seen.append(dict(self.headers))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def agent_url() -> Iterator[tuple[str, list[dict[str, str]]]]:
    handler = type("Agent", (_Agent,), {"seen": []})
    with serving_thread(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as url:
        yield url + "/agent", handler.seen


def _recognisable_parts(secret: str) -> list[str]:
    """The secret, its body without the prefix, and every 10-character window of that body."""
    body = secret.split("_", 1)[1]
    return [secret, body, *(body[i : i + 10] for i in range(len(body) - 9))]


def _assert_absent(secrets: list[str], output: str, where: str) -> None:
    for secret in secrets:
        for part in _recognisable_parts(secret):
            assert part not in output, f"part of a {secret[:4]}… secret in the {where}: {part!r}"


async def _wait_for(predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_runtime_tokens_and_agent_secrets_never_reach_the_logs(ctx, spawn, agent_url):
    url, pushed = agent_url
    debug = {"HOOKGATE_LOG_LEVEL": "debug"}
    gateway = spawn.start("gateway", gateway=True, extra_env=debug)
    worker = spawn.start("worker", extra_env=debug)
    gateway.wait_ready()
    w = await factories.world(ctx)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        http_agent = (await http.post("/v1/agents", headers=w.auth, json={
            "name": "pusher", "runtime": {"kind": "http", "url": url}})).json()
        pull_agent = (await http.post("/v1/agents", headers=w.auth, json={
            "name": "puller", "runtime": {"kind": "pull"}})).json()
        secrets = [http_agent["signing_secret"], pull_agent["runtime_token"]]
        ap = (await http.post("/v1/autopilots", headers=w.auth, json={
            "title": "t", "instructions": "i", "execution_mode": "run_only",
            "assignee": {"type": "agent", "id": http_agent["id"]}})).json()
        hook = (await http.post(f"/v1/autopilots/{ap['id']}/triggers", headers=w.auth,
                                json={"kind": "webhook", "provider": "generic"})).json()
        sent = await http.post(f"/hooks/{hook['token']}", json={"event": "order.paid"},
                               headers={"idempotency-key": "evt-1"})
        assert sent.json()["status"] == "accepted", sent.text
        await _wait_for(lambda: bool(pushed))
        good = {"authorization": f"Bearer {pull_agent['runtime_token']}"}
        bad_tokens = [pull_agent["runtime_token"] + "x", pull_agent["runtime_token"][:-2],
                      secrets[0], pull_agent["runtime_token"].removeprefix("hgr_")]
        answers = [await http.post("/v1/runtime/claim", headers=good, json={"wait_s": 0}),
                   await http.post("/v1/runtime/heartbeat", headers=good, json={})]
        for bad in bad_tokens:
            answers.append(await http.post("/v1/runtime/claim", headers={"authorization": f"Bearer {bad}"},
                                           json={"wait_s": 0}))
            answers.append(await http.get(f"/v1/runtime/claim?token={bad}"))
        answers.append(await http.post("/v1/runtime/claim", headers=good, content=b"{not json"))
    assert pushed[0]["webhook-signature"].startswith("v1,")
    assert {a.status_code for a in answers} >= {200, 401}
    for answer in answers:
        _assert_absent(secrets, answer.text, f"answer to {answer.request.url.path}")
    _assert_absent(secrets, gateway.output(), "gateway log")
    _assert_absent(secrets, worker.output(), "worker log")
    assert '"level": "debug"' in gateway.output() + worker.output(), "nothing was logged at debug level"


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def test_an_exception_logged_with_secrets_in_its_args_is_redacted(capsys, root_logging):
    token = "hgr_" + "Zk3v9QpL2mXw8RtY6uHn4JbC1sDf7GaE"
    secret = "whsec_" + "MfKQ9r8G+KYqrTwjUPD8/ILPZIo2LaLaSwZk3v9QpL2m0="
    logs.configure("debug")
    log = logging.getLogger("hookgate.test")
    try:
        raise RuntimeError("push failed", {"token": token, "secret": secret}, secret.encode())
    except RuntimeError as exc:
        log.exception("failed with %r", exc.args, extra={"token": token, "detail": [secret]})
    log.debug("header %s and key %s", f"Bearer {token}", repr(secret.encode()))
    # Percent-encoded inside a URL (a redirect target, a callback) and glued to a word character.
    encoded = quote(f"/cb?token={token}&key={secret}", safe="")
    log.warning("callback %s, raw %s", f"https://a.test/login?next={encoded}", f"x_{token} Bearer{token}")
    err = capsys.readouterr().err
    assert err.count("\n") >= 3 and "RuntimeError" in err
    _assert_absent([token, secret], err, "log")
