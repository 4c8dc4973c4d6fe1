"""``hookgate listen`` end to end: a webhook through ingress reaches a local app as a signed POST.

The app's answer is the task's report. Real processes only: the gateway (``serve``), the listener, the app.
"""

from __future__ import annotations

import http.server
import json
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.acceptance.cli import ARGV, cli_env, hookgate, hookgate_json
from tests.conftest import TEST_SECRET_KEY
from tests.processes import ROOT, Proc, Spawner
from tests.servers import QuietHandler, serving_thread


@dataclass
class LocalApp:
    """The developer's app: verifies each POST with the standardwebhooks library, answers ``status``."""

    url: str
    status: int = 200
    secret: str | None = None
    verified: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


@pytest.fixture
def local_app() -> Iterator[LocalApp]:
    """A real HTTP server on loopback playing the app under development."""
    app = LocalApp(url="")

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", 0)))
            try:
                assert app.secret is not None
                body = Webhook(app.secret).verify(raw, dict(self.headers.items()))
            except (AssertionError, WebhookVerificationError) as exc:
                app.refused.append(str(exc))
                self.send_response(400)
                self.end_headers()
                return
            app.verified.append(body)
            answer = json.dumps({"handled": body["task_id"]}).encode()
            self.send_response(app.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    with serving_thread(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        app.url = url + "/hooks/agent"
        yield app


@dataclass
class World:
    """A served gateway with a pull agent, a run_only autopilot on it and a generic webhook trigger."""

    gateway: Proc
    admin: dict[str, str]
    runtime_token: str
    hook_url: str


@pytest.fixture
def world(db_url: str, spawn: Spawner) -> World:
    server_env = {"HOOKGATE_DATABASE_URL": db_url, "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY}
    boot = hookgate_json("bootstrap", "--workspace", "listen", env=server_env)
    gateway = spawn.start("serve", gateway=True, extra_env={"HOOKGATE_RUNTIME_CLAIM_POLL_S": "0.2"})
    gateway.wait_ready(60)
    admin = {"HOOKGATE_URL": gateway.url, "HOOKGATE_API_KEY": str(boot["api_key"])}
    agent = hookgate_json("agents", "create", "--name", "laptop", "--pull", env=admin)
    autopilot = hookgate_json("autopilots", "create", "--title", "on hook", "--agent", agent["id"], "--mode",
                              "run_only", env=admin)
    trigger = hookgate_json("triggers", "create", "--autopilot", autopilot["id"], env=admin)
    return World(gateway, admin, agent["runtime_token"], f"{gateway.url}/hooks/{trigger['token']}")


@dataclass
class Listening:
    """A running ``hookgate listen`` and what it printed."""

    proc: subprocess.Popen[str]
    err_lines: list[str] = field(default_factory=list)
    out_lines: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    def pump(self) -> None:
        """Read both streams in threads, line by line."""
        for stream, into in ((self.proc.stdout, self.out_lines), (self.proc.stderr, self.err_lines)):
            reader = threading.Thread(target=lambda s=stream, i=into: [i.append(line) for line in s], daemon=True)
            reader.start()
            self.readers.append(reader)

    def close(self) -> None:
        """Kill it if it still runs; close its pipes once read to the end."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for reader in self.readers:
            reader.join(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def listen(world: World) -> Iterator[Callable[..., Listening]]:
    started: list[Listening] = []

    def start(app: LocalApp, *extra: str) -> Listening:
        proc = subprocess.Popen(
            [*ARGV, "listen", "--forward-to", app.url, "--json", *extra],
            env=cli_env({"HOOKGATE_URL": world.gateway.url, "HOOKGATE_RUNTIME_TOKEN": world.runtime_token}),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running = Listening(proc)
        running.pump()
        started.append(running)
        banner = until(lambda: next((m for line in running.err_lines if (m := re.search(r"whsec_\S+", line))), None),
                       proc, "the signing secret banner")
        app.secret = banner.group(0)
        return running

    yield start
    for running in started:
        running.close()


def until(probe: Callable[[], Any], proc: subprocess.Popen[str] | None = None, what: str = "it",
          timeout: float = 30) -> Any:
    """Poll ``probe`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (found := probe()):
            return found
        assert proc is None or proc.poll() is None, f"the listener exited while waiting for {what}"
        time.sleep(0.05)
    raise TimeoutError(f"no {what} within {timeout}s")


def tasks_of(world: World, run_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{world.gateway.url}/v1/tasks", params={"run_id": run_id}, timeout=10,
                       headers={"Authorization": f"Bearer {world.admin['HOOKGATE_API_KEY']}"})
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def test_a_webhook_reaches_the_local_app_signed_and_its_answer_completes_the_run(world, local_app, listen):
    running = listen(local_app)
    sent = httpx.post(world.hook_url, json={"action": "opened", "n": 7}, timeout=10)
    assert sent.status_code == 200, sent.text
    run_id = sent.json()["run_id"]

    line = json.loads(until(lambda: running.out_lines and running.out_lines[0], running.proc, "a task line"))
    assert local_app.refused == []
    [body] = local_app.verified
    assert body["run_id"] == run_id and body["payload"]["payload"] == {"action": "opened", "n": 7}
    assert "lease_token" not in body  # the listener reports, not the app
    assert (line["run_id"], line["http_status"], line["status"]) == (run_id, 200, "succeeded")
    [task] = tasks_of(world, run_id)
    assert task["status"] == "succeeded" and task["result"] == {"handled": task["id"]}
    run = hookgate_json("runs", "get", run_id, env=world.admin)
    assert run["status"] == "completed", run

    running.proc.send_signal(signal.SIGINT)
    assert running.proc.wait(15) == 0
    assert not any("Traceback" in line for line in running.err_lines), running.err_lines


def test_a_500_from_the_local_app_is_a_retryable_failure(world, local_app, listen):
    local_app.status = 500
    running = listen(local_app)
    sent = httpx.post(world.hook_url, json={"action": "closed"}, timeout=10)
    run_id = sent.json()["run_id"]

    line = json.loads(until(lambda: running.out_lines and running.out_lines[0], running.proc, "a task line"))
    assert (line["http_status"], line["status"]) == (500, "queued")  # put back for a retry
    [task] = tasks_of(world, run_id)
    assert task["status"] == "queued" and task["retry_class"] == "retryable", task
    assert task["error"] == "the local app answered 500"


def test_without_a_runtime_token_listen_says_so_in_one_line(local_app):
    done = hookgate("listen", "--forward-to", local_app.url, env={}, timeout=30)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "hookgate: error: no runtime token: pass --token or set HOOKGATE_RUNTIME_TOKEN (a pull agent's hgr_ token)"]

