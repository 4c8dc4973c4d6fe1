"""``hookgate send``: a signed sample of every provider preset is accepted by a real trigger of that preset.

The real CLI against a real gateway whose public URL is its own address (Twilio signs the URL). A wrong
secret is refused (exit 1, ``401 invalid_signature``) and stored as rejected.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from hookgate.preset_data import PRESET_DATA
from hookgate.send import SAMPLES
from tests.acceptance.cli import hookgate
from tests.conftest import TEST_SECRET_KEY
from tests.processes import Spawner, free_port

SECRETS = {name: "whsec_c2FtcGxlLXNpZ25pbmctc2VjcmV0LWJ5dGVz" if name == "standard" else f"{name}-secret-1234"
           for name in SAMPLES if name not in PRESET_DATA}
"""The presets with code of their own; the data presets' HMAC ones are sent below, one request each."""


def _ok(*args: str, env: dict[str, str]) -> Any:
    done = hookgate(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def owner_env(db_url: str, spawn: Spawner) -> dict[str, str]:
    """The env of an owner of a gateway whose public URL is its real address."""
    boot = json.loads(hookgate("bootstrap", "--json", env={"HOOKGATE_DATABASE_URL": db_url,
                                                            "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY}).stdout)
    port = free_port()
    proc = spawn.start("gateway", "--port", str(port), extra_env={"HOOKGATE_PUBLIC_URL": f"http://127.0.0.1:{port}"})
    proc.port = port
    proc.wait_ready(60)
    return {"HOOKGATE_URL": proc.url, "HOOKGATE_API_KEY": boot["api_key"]}


def test_a_signed_sample_of_every_preset_is_accepted_and_a_wrong_secret_rejected(owner_env):
    env = owner_env
    agent = _ok("agents", "create", "--name", "bot", "--endpoint", "http://127.0.0.1:9/agent", env=env)
    autopilot = _ok("autopilots", "create", "--title", "t", "--agent", agent["id"], "--mode", "run_only", env=env)
    for provider, secret in SECRETS.items():
        trigger = _ok("triggers", "create", "--autopilot", autopilot["id"], "--provider", provider, env=env)
        _ok("triggers", "set-secret", trigger["id"], "--secret", secret, env=env)
        by_id = _ok("send", trigger["id"], "--secret", secret, env=env)  # URL and provider read with the API
        assert by_id["status"] == "accepted", (provider, by_id)
        by_url = hookgate("send", trigger["url"], "--provider", provider, "--secret", secret, env={})
        assert by_url.returncode == 0 and "accepted" in by_url.stdout, (provider, by_url.stdout, by_url.stderr)
        wrong = hookgate("send", trigger["url"], "--provider", provider, "--secret", secret[:-1] + "X", env={})
        assert wrong.returncode == 1 and wrong.stdout == "", (provider, wrong.stderr)
        assert wrong.stderr.startswith("hookgate: error: 401 invalid_signature: "), (provider, wrong.stderr)
        deliveries = _ok("deliveries", "list", "--trigger", trigger["id"], env=env)["items"]
        assert [d["signature_status"] for d in deliveries] == ["invalid", "valid", "valid"], (provider, deliveries)
        assert deliveries[0]["status"] == "rejected"


def test_a_signed_sample_of_each_data_preset_the_cli_can_sign_is_accepted(owner_env):
    env = owner_env
    with httpx.Client(base_url=env["HOOKGATE_URL"], timeout=10,
                      headers={"Authorization": f"Bearer {env['HOOKGATE_API_KEY']}"}) as api:
        agent = api.post("/v1/agents", json={"name": "bot", "runtime": {"kind": "http", "url": "http://127.0.0.1:9/"}})
        autopilot = api.post("/v1/autopilots", json={"title": "t", "instructions": "i", "execution_mode": "run_only",
                                                     "assignee": {"type": "agent", "id": agent.json()["id"]}}).json()
        triggers = {name: api.post(f"/v1/autopilots/{autopilot['id']}/triggers",
                                   json={"kind": "webhook", "provider": name}).json()
                    for name, data in PRESET_DATA.items() if data["signature"]["kind"] == "hmac"}
        for trigger in triggers.values():
            api.put(f"/v1/triggers/{trigger['id']}/signing-secret", json={"secret": "a data preset's secret"})
    for provider, trigger in triggers.items():
        sent = _ok("send", trigger["id"], "--secret", "a data preset's secret", env=env)
        assert sent["status"] == "accepted", (provider, sent)


def test_send_names_the_event_and_merges_data(owner_env):
    env = owner_env
    agent = _ok("agents", "create", "--name", "bot", "--endpoint", "http://127.0.0.1:9/agent", env=env)
    autopilot = _ok("autopilots", "create", "--title", "t", "--agent", agent["id"], "--mode", "run_only", env=env)
    trigger = _ok("triggers", "create", "--autopilot", autopilot["id"], "--provider", "stripe", env=env)
    _ok("triggers", "set-secret", trigger["id"], "--secret", "whsec_stripe_test_1234", env=env)
    sent = _ok("send", trigger["id"], "--secret", "whsec_stripe_test_1234", "--event", "invoice.paid", "--data",
               '{"livemode": true}', env=env)
    delivery = _ok("deliveries", "get", sent["delivery_id"], env=env)
    assert delivery["event"] == "stripe.invoice.paid" and json.loads(delivery["body"])["livemode"] is True
    unsigned = hookgate("send", trigger["url"], "--provider", "stripe", env={})
    assert unsigned.returncode == 1 and "401 missing_signature" in unsigned.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("send", "not-a-trigger"), "not a trigger id"),
        (("send", "http://127.0.0.1:9/somewhere"), "not a trigger URL"),
        (("send", "http://127.0.0.1:9/hooks/awt_x", "--provider", "bitbucket"), "invalid choice: 'bitbucket'"),
        (("send", "http://127.0.0.1:9/hooks/awt_x", "--data", "[1]"), "--data: a JSON object"),
        (("send", "http://127.0.0.1:1/hooks/awt_x"), "cannot reach http://127.0.0.1:1/hooks/awt_x"),
        (("send", "00000000-0000-0000-0000-000000000000"), "needs an API key"),
    ],
)
def test_send_bad_input_is_one_error_line_and_exit_2(args, needle):
    done = hookgate(*args, env={})
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert len(done.stderr.splitlines()) == 1 and needle in done.stderr, done.stderr


def test_handshakes_and_replies_set_with_the_cli_are_answered_to_hookgate_send(owner_env, tmp_path):
    env = owner_env
    agent = _ok("agents", "create", "--name", "bot", "--endpoint", "http://127.0.0.1:9/agent", env=env)
    autopilot = _ok("autopilots", "create", "--title", "t", "--agent", agent["id"], "--mode", "run_only", env=env)
    meta = _ok("triggers", "create", "--autopilot", autopilot["id"], "--provider", "meta", "--verify-token",
               "meatyhamhock", env=env)
    assert meta["handshake"] == {"kind": "meta"} and meta["verify_token_hint"] == "hock"
    assert "meatyhamhock" not in json.dumps(_ok("triggers", "get", meta["id"], env=env))
    good = hookgate("send", meta["id"], "--handshake", "--verify-token", "meatyhamhock", env=env)
    assert good.returncode == 0 and good.stdout.startswith("GET 200 "), (good.stdout, good.stderr)
    wrong = hookgate("send", meta["id"], "--handshake", "--verify-token", "not-the-token", env=env)
    assert wrong.returncode == 1 and "403" in wrong.stdout and "verify_token_mismatch" in wrong.stdout
    zoom = _ok("triggers", "create", "--autopilot", autopilot["id"], "--provider", "zoom", env=env)
    _ok("triggers", "set-secret", zoom["id"], "--secret", "zoom-secret-token", env=env)
    shaken = hookgate("send", zoom["id"], "--handshake", "--secret", "zoom-secret-token", env=env)
    assert shaken.returncode == 0 and '"encryptedToken"' in shaken.stdout, (shaken.stdout, shaken.stderr)
    discord = _ok("triggers", "create", "--autopilot", autopilot["id"], "--provider", "discord", env=env)
    probe = hookgate("send", discord["id"], "--handshake", env=env)  # unsigned: Discord's own probe
    assert probe.returncode == 1 and "409" in probe.stdout  # no public key set yet: handshake_needs_secret
    (tmp_path / "reply.json").write_text(json.dumps({"status": 200, "content_type": "text/xml",
                                                    "body": "<Response/>"}))
    graph = _ok("triggers", "create", "--autopilot", autopilot["id"], "--handshake-file",
                '{"kind": "echo_query", "param": "validationToken"}', "--reply-file", f"@{tmp_path / 'reply.json'}",
                env=env)
    assert graph["handshake"]["param"] == "validationToken" and graph["reply"]["body"] == "<Response/>"
    echoed = hookgate("send", graph["id"], "--handshake", env=env)
    assert echoed.returncode == 0 and echoed.stdout.startswith("GET 200 "), echoed.stdout
    answer = httpx.post(graph["url"], json={"event": "x"}, timeout=10)
    assert (answer.status_code, answer.text) == (200, "<Response/>")
    cleared = _ok("triggers", "update", graph["id"], "--reply-file", "none", "--handshake-file", "none", env=env)
    assert cleared["reply"] is None and cleared["handshake"] is None
    bad = hookgate("triggers", "update", graph["id"], "--reply-file", '{"status": 500}', env=env)
    assert bad.returncode == 1 and "invalid_reply" in bad.stderr and "Traceback" not in bad.stderr
