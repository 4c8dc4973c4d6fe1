"""Request ids, bound log fields, the redacted access log, and no credential in any log line."""

import hashlib
import hmac
import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from autopilot import rules, workspaces
from gateway.access import REDACTED_HOOK_PATH, redacted_path
from hookgate import crypto, logs
from hookgate.context import Context
from tests import factories
from tests.processes import ROOT

# Anything shaped like one of our credentials, redacted or not; "_[redacted]" is the only allowed body.
CREDENTIAL_SHAPE = re.compile(
    r"\b(?:awt|hgk|hgr)_(?!\[redacted\])[A-Za-z0-9_\-]{8,}|whsec_(?!\[redacted\])[A-Za-z0-9+/=]{8,}"
)


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """Every record of every logger, formatted by our JSON formatter into a buffer."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def entries(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


async def test_every_response_carries_a_request_id_and_a_sane_incoming_one_is_kept(client):
    fresh = await client.get("/healthz")
    assert re.fullmatch(r"[0-9a-f]{32}", fresh.headers["x-request-id"])
    kept = await client.get("/healthz", headers={"X-Request-Id": "lb-1234-abcd"})
    assert kept.headers["x-request-id"] == "lb-1234-abcd"
    for hostile in ("a b c d e f g h", "x" * 300, "awt_" + "A" * 43, "short"):
        answer = await client.get("/healthz", headers={"X-Request-Id": hostile})
        assert answer.headers["x-request-id"] != hostile


async def test_access_line_has_request_id_status_and_a_redacted_hook_path(client, json_lines):
    token = crypto.new_token("awt_")
    answer = await client.post(f"/hooks/{token}?sig={token}", json={"a": 1}, headers={"X-Request-Id": "req-000042"})
    access = [e for e in entries(json_lines) if e["logger"] == "hookgate.access"]
    assert access[-1]["path"] == REDACTED_HOOK_PATH
    assert access[-1]["status"] == answer.status_code and access[-1]["request_id"] == "req-000042"
    assert access[-1]["method"] == "POST" and access[-1]["duration_ms"] >= 0
    assert token not in json_lines.getvalue()


def test_any_path_under_hooks_is_redacted_whatever_its_shape():
    assert redacted_path("/hooks/not-even-a-token") == REDACTED_HOOK_PATH
    assert redacted_path("/hooks/awt_x/extra") == REDACTED_HOOK_PATH
    assert redacted_path("/v1/me") == "/v1/me"
    assert redacted_path("/dashboard/hgk_" + "a" * 43) == "/dashboard/hgk_[redacted]"


def test_fields_bound_in_a_scope_reach_every_record_and_end_with_it(json_lines):
    log = logging.getLogger("hookgate.test")
    with logs.scope(request_id="r1"):
        logs.bind(trigger_id="t1", delivery_id="d1", run_id=None)
        log.info("inside")
        with logs.scope(run_id="u1"):
            log.info("nested")
    log.info("outside")
    inside, nested, outside = entries(json_lines)[-3:]
    assert (inside["request_id"], inside["trigger_id"], inside["delivery_id"]) == ("r1", "t1", "d1")
    assert "run_id" not in inside and nested["run_id"] == "u1" and nested["trigger_id"] == "t1"
    assert "request_id" not in outside and "trigger_id" not in outside


def test_credentials_inside_messages_arguments_and_exceptions_are_masked(json_lines):
    log = logging.getLogger("hookgate.test")
    secrets = [crypto.new_token(p) for p in ("awt_", "hgk_", "hgr_")] + [crypto.new_signing_secret()]
    log.warning("saw %s", secrets[0], extra={"key": secrets[1]})
    try:
        raise ValueError(f"bad token {secrets[2]} and {secrets[3]}")
    except ValueError:
        log.exception("failed")
    text = json_lines.getvalue()
    assert not any(s in text for s in secrets)
    assert not CREDENTIAL_SHAPE.search(text)


def _sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _workload(base: str, issued: list[str], w: factories.World, token: str, secret: str, runtime: str) -> None:
    """A representative mix of traffic, including credentials in places a careless log would print."""
    with httpx.Client(base_url=base, timeout=10) as http:
        for i in range(5):
            body = json.dumps({"event": "push", "n": i}).encode()
            http.post(f"/hooks/{token}", content=body, headers={
                "Content-Type": "application/json", "X-Hub-Signature-256": _sign(secret, body),
                "Idempotency-Key": f"k-{i}", "X-Request-Id": token})
        http.post(f"/hooks/{token}", content=b"{}", headers={"X-Hub-Signature-256": "sha256=00"})
        http.post(f"/hooks/{token}?token={token}", content=b"not json", headers={"Content-Type": "text/plain"})
        http.post(f"/hooks/{token[:-3]}", json={})
        http.post(f"/hooks/{crypto.new_token('awt_')}", json={})
        http.get("/v1/me", headers=w.auth)
        created = http.post(f"/v1/members/{w.owner_id}/keys", headers=w.auth)
        if created.status_code == 201:
            issued.append(created.json()["api_key"])
        http.post("/v1/runtime/heartbeat", headers={"Authorization": f"Bearer {runtime}"})
        http.get("/v1/me", headers={"Authorization": f"Bearer {crypto.new_token('hgk_')}"})
        for runtime_spec in ({"kind": "http", "url": "http://127.0.0.1:9/agent"}, {"kind": "pull"}):
            made = http.post("/v1/agents", headers=w.auth, json={"name": "logged", "runtime": runtime_spec})
            if made.status_code == 201:
                issued.append(made.json().get("signing_secret") or made.json().get("runtime_token"))
        page = http.get("/dashboard/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        http.post("/dashboard/login", data={"api_key": w.api_key, "csrf": csrf.group(1) if csrf else ""})
        http.get("/dashboard")
        http.get("/dashboard/deliveries")
        http.get("/metrics")


async def test_no_issued_credential_appears_in_any_log_line_of_a_real_run(spawn, ctx: Context, tmp_path):
    w = await factories.world(ctx)
    http_agent = await factories.http_agent(w)
    pull_agent = await factories.pull_agent(w)
    pilot = await factories.autopilot(w, http_agent.row["id"])
    secret = "s3cret-" + os.urandom(12).hex()
    trigger, token = await factories.webhook_trigger(w, pilot, secret=secret)
    async with ctx.pool.acquire() as conn:
        _, second_key = await workspaces.issue_key(conn, w.workspace_id, w.owner_id)
        await rules.set_signing_secret(conn, ctx.keyring, trigger["id"], secret)
    issued = [w.api_key, second_key, token, secret, http_agent.signing_secret, pull_agent.runtime_token]
    debug = {"HOOKGATE_LOG_LEVEL": "debug"}
    gateway = spawn.start("gateway", gateway=True, extra_env=debug)
    worker = spawn.start("worker", extra_env=debug)
    scheduler = spawn.start("scheduler", extra_env=debug)
    gateway.wait_ready()
    new_secret = "rotated-" + os.urandom(12).hex()
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        put = http.put(f"/v1/triggers/{trigger['id']}/signing-secret", headers=w.auth, json={"secret": new_secret})
        if put.status_code == 200:
            issued.append(new_secret)
            secret = new_secret
    _workload(gateway.url, issued, w, token, secret, pull_agent.runtime_token or "")
    boot = subprocess.run(
        [sys.executable, "-m", "hookgate.cli", "bootstrap", "--workspace", "acme", "--json"], cwd=ROOT,
        env={**os.environ, **spawn.env, "PYTHONPATH": str(ROOT), **debug}, capture_output=True, text=True, timeout=60,
    )
    issued.append(json.loads(boot.stdout)["api_key"])
    for proc in (gateway, worker, scheduler):
        proc.signal(15)
        proc.wait(30)
    outputs = {"gateway": gateway.output(), "worker": worker.output(), "scheduler": scheduler.output(),
               "bootstrap stderr": boot.stderr}
    assert outputs["gateway"].count('"logger": "hookgate.access"') >= 12
    for name, text in outputs.items():
        for value in issued:
            assert value and value not in text, f"an issued credential appears in the {name} log"
        assert not CREDENTIAL_SHAPE.search(text), f"{name}: {CREDENTIAL_SHAPE.search(text)}"


async def test_an_unhandled_error_is_logged_once_with_its_request_id_and_answered_a_bare_500(ctx, json_lines):
    from gateway.app import create_app

    async def boom(request):
        raise RuntimeError("bug with " + crypto.new_token("hgk_"))

    app = create_app(ctx)
    app.add_route("/boom", boom)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        answer = await http.get("/boom", headers={"X-Request-Id": "req-boom-01"})
    assert answer.status_code == 500 and answer.json() == {"error": "internal_error", "message": "internal error"}
    errors = [e for e in entries(json_lines) if e["msg"] == "unhandled error"]
    assert len(errors) == 1 and errors[0]["request_id"] == "req-boom-01" and "RuntimeError" in errors[0]["exc"]
    assert not CREDENTIAL_SHAPE.search(json_lines.getvalue())
    access = [e for e in entries(json_lines) if e["logger"] == "hookgate.access"]
    assert access[-1]["status"] == 500 and access[-1]["request_id"] == "req-boom-01"


async def test_admin_requests_log_the_ids_in_their_path(client, ctx: Context, json_lines):
    s = await factories.small(ctx)
    await client.get(f"/v1/triggers/{s.trigger['id']}", headers=s.world.auth)
    access = [e for e in entries(json_lines) if e["logger"] == "hookgate.access"]
    assert access[-1]["trigger_id"] == str(s.trigger["id"]) and access[-1]["status"] == 200


async def test_a_webhook_access_line_carries_trigger_delivery_and_run_ids(client, ctx: Context, json_lines):
    s = await factories.small(ctx)
    answer = await client.post(f"/hooks/{s.token}", json={"event": "ping"})
    assert answer.status_code == 200
    line = [e for e in entries(json_lines) if e["logger"] == "hookgate.access"][-1]
    assert line["trigger_id"] == str(s.trigger["id"]) and line["preset"] == "generic"
    assert line["delivery_id"] == answer.json()["delivery_id"] and line["run_id"] == answer.json()["run_id"]
    assert line["outcome"] == "accepted" and line["path"] == REDACTED_HOOK_PATH
