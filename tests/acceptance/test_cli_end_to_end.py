"""Issue 6 end to end, through the real CLI and HTTP only.

Bootstrap, agent, autopilot, GitHub trigger, a GitHub-signed delivery, the run, token rotation (the old URL
answers 404, the new one is accepted).
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.acceptance.cli import hookgate_json as hookgate
from tests.conftest import TEST_SECRET_KEY
from tests.servers import QuietHandler, serving_thread

GITHUB_SECRET = "gh-webhook-secret-e2e"


@pytest.fixture
def agent_server() -> Iterator[str]:
    """A real local HTTP agent that answers 200 to every push."""

    class Agent(QuietHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.end_headers()

    with serving_thread(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Agent)) as url:
        yield url + "/agent"


def github_post(url: str, payload: dict[str, object]) -> httpx.Response:
    """POST like GitHub: X-GitHub-Event/Delivery and X-Hub-Signature-256 over the raw bytes."""
    raw = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(GITHUB_SECRET.encode(), raw, hashlib.sha256).hexdigest()
    return httpx.post(url, content=raw, timeout=10, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": signature, "User-Agent": "GitHub-Hookshot/e2e"})


def test_github_webhook_through_the_cli_then_rotation_cuts_the_old_url(db_url, spawn, agent_server):
    server_env = {"HOOKGATE_DATABASE_URL": db_url, "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY}
    boot = hookgate("bootstrap", "--workspace", "e2e", env=server_env)
    gateway = spawn.start("gateway", gateway=True)
    gateway.wait_ready()
    cli = {"HOOKGATE_URL": gateway.url, "HOOKGATE_API_KEY": str(boot["api_key"])}

    agent = hookgate("agents", "create", "--name", "e2e-agent", "--endpoint", agent_server, env=cli)
    autopilot = hookgate("autopilots", "create", "--title", "on push", "--agent", str(agent["id"]),
                         "--mode", "run_only", env=cli)
    trigger = hookgate("triggers", "create", "--autopilot", str(autopilot["id"]), "--provider", "github", env=cli)
    assert hookgate("triggers", "set-secret", str(trigger["id"]), "--secret", GITHUB_SECRET, env=cli) == {
        "hint": GITHUB_SECRET[-4:]}
    old_url = f"{gateway.url}/hooks/{trigger['token']}"

    accepted = github_post(old_url, {"ref": "refs/heads/main", "commits": []})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["status"] == "accepted"
    run = hookgate("runs", "get", str(accepted.json()["run_id"]), env=cli)
    assert (run["source"], run["trigger_id"], run["delivery_id"]) == (
        "webhook", trigger["id"], accepted.json()["delivery_id"])
    assert run["accountable_id"] == boot["member_id"] and run["originator_id"] is None
    over_http = httpx.get(f"{gateway.url}/v1/runs/{run['id']}", headers={
        "Authorization": f"Bearer {boot['api_key']}"}, timeout=10)
    assert over_http.status_code == 200 and over_http.json()["chain"]["delivery"]["id"] == run["delivery_id"]

    rotated = hookgate("triggers", "rotate-token", str(trigger["id"]), env=cli)
    assert rotated["token"] != trigger["token"]
    gone = github_post(old_url, {"ref": "refs/heads/main"})
    assert gone.status_code == 404 and gone.json()["error"] == "not_found"
    fresh = github_post(f"{gateway.url}/hooks/{rotated['token']}", {"ref": "refs/heads/main"})
    assert fresh.status_code == 200 and fresh.json()["status"] == "accepted", fresh.text
