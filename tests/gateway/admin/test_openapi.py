"""The OpenAPI document covers every HTTP API, is valid OpenAPI 3.1, and the answers match it.

Schemathesis runs against the admin and runtime operations of the served document (no 5xx, no schema
drift); the webhook ingress's answers are checked here against their documented schemas one by one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from tests import factories
from tests.gateway import ingress_kit as kit

ST = Path(sys.executable).with_name("st")


def _answers_as_documented(doc: dict[str, Any], path: str, answer: Any) -> None:
    """``answer`` (an httpx response) has a documented status and a body its schema accepts."""
    responses = doc["paths"][path]["post"]["responses"]
    assert str(answer.status_code) in responses, (answer.status_code, answer.text)
    documented = responses[str(answer.status_code)]
    schema = {**documented["content"]["application/json"]["schema"], "components": doc["components"]}
    errors = [e.message for e in jsonschema_rs.Draft202012Validator(schema).iter_errors(answer.json())]
    assert not errors, (answer.status_code, answer.text, errors)
    if "headers" in documented:
        assert answer.headers["retry-after"].isdigit()


def _routes(routes: list[Any]) -> set[tuple[str, str]]:
    """(method, OpenAPI path) of Starlette routes; ``{token:path}`` is written ``{token}``."""
    return {(method, route.path.replace(":path}", "}")) for route in routes for method in route.methods - {"HEAD"}}


async def test_openapi_document_describes_every_admin_runtime_and_webhook_route(client):
    from gateway import admin, runtime
    from gateway.ingress import endpoint as ingress

    doc = (await client.get("/openapi.json")).json()
    assert doc["openapi"] == "3.1.0" and doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    api = {(e.method, e.path) for e in admin.ENDPOINTS} | _routes(runtime.routes) | _routes(ingress.routes)
    assert documented == api and ("POST", "/hooks/{token}") in api and len(_routes(runtime.routes)) == 4
    operation_ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(operation_ids) == len(set(operation_ids)) == len(api)
    create = doc["paths"]["/v1/autopilots/{autopilot_id}/runs"]["post"]
    assert set(create["responses"]) == {"201", "400", "401", "403", "404", "409", "413", "422", "429"}
    assert set(create["responses"]["429"]["headers"]) == {"Retry-After"}  # bad credentials from the address
    assert any(p["name"] == "Idempotency-Key" for p in create["parameters"])
    runs = doc["paths"]["/v1/runs"]["get"]["parameters"]
    assert {p["name"] for p in runs} == {"limit", "cursor", "autopilot_id", "status", "source"}
    schema = doc["components"]["schemas"]["RunDetail"]
    assert {"chain", "originator_id", "accountable_id", "rule_version_id"} <= set(schema["properties"])


async def test_openapi_documents_attempts_retry_schedules_and_health(client):
    doc = (await client.get("/openapi.json")).json()
    listing = doc["paths"]["/v1/tasks/{task_id}/attempts"]["get"]
    assert {p["name"] for p in listing["parameters"]} == {"task_id", "limit", "cursor"}
    assert {"200", "401", "404", "422"} <= set(listing["responses"])
    page = listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    schemas = doc["components"]["schemas"]
    assert set(schemas[page]["properties"]) == {"items", "next_cursor"}
    attempt = schemas["AttemptOut"]["properties"]
    assert {"attempt", "outcome", "http_status", "error", "duration_ms", "response_headers", "response_body"} <= set(
        attempt)
    assert set(attempt["outcome"]["enum"]) == {"succeeded", "accepted", "failed", "timeout", "unreachable",
                                               "egress_forbidden", "lease_lost", "cancelled"}
    assert {"retry_schedule", "health"} <= set(schemas["AgentOut"]["properties"])
    assert set(schemas["HealthOut"]["properties"]) == {"state", "since", "next_probe_at", "failures", "last_error"}
    for body in ("AgentIn", "AgentPatch"):
        [steps] = [s for s in schemas[body]["properties"]["retry_schedule"]["anyOf"] if s.get("type") == "array"]
        assert (steps["minItems"], steps["maxItems"], steps["items"]["maximum"]) == (1, 20, 7 * 86400)
        assert steps["items"]["exclusiveMinimum"] == 0
    assert {"next_attempt_at", "last_error"} <= set(schemas["TaskOut"]["properties"])
    assert {"attempt", "next_attempt_at", "last_error"} <= set(schemas["RunOut"]["properties"])
    assert {"attempt", "next_attempt_at", "last_error", "latest_attempt"} <= set(schemas["RunDetail"]["properties"])


async def test_runtime_operations_take_the_runtime_token_and_renew_report_also_a_bare_lease_token(client):
    doc = (await client.get("/openapi.json")).json()
    scheme = doc["components"]["securitySchemes"]["runtimeToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer") and "hgr_" in scheme["description"]
    ops = {path: ops["post"] for path, ops in doc["paths"].items() if path.startswith("/v1/runtime/")}
    assert ops["/v1/runtime/heartbeat"]["security"] == ops["/v1/runtime/claim"]["security"] == [{"runtimeToken": []}]
    for action in ("renew", "report"):
        op = ops[f"/v1/runtime/tasks/{{task_id}}/{action}"]
        assert op["security"] == [{"runtimeToken": []}, {}]
        assert {"200", "401", "404", "409", "413", "422", "429", "503"} <= set(op["responses"])
    claim = ops["/v1/runtime/claim"]
    assert set(claim["responses"]) == {"200", "204", "400", "401", "413", "422", "429", "503"}
    assert "content" not in claim["responses"]["204"]
    schemas = doc["components"]["schemas"]
    assert schemas["ReportBody"]["required"] == ["lease_token", "status"]
    assert schemas["ReportBody"]["properties"]["status"]["enum"] == ["succeeded", "failed"]
    assert {"task", "lease_token", "lease_expires_at"} == set(schemas["Claim"]["properties"])
    assert schemas["ClaimBody"]["properties"]["wait_s"]["minimum"] == 0


async def test_webhook_operation_documents_bodies_every_answer_and_each_preset_header(client):
    from gateway.providers import PRESETS

    doc = (await client.get("/openapi.json")).json()
    op = doc["paths"]["/hooks/{token}"]["post"]
    assert op["security"] == [{}]  # the token in the path is the credential; no Authorization is read
    assert set(op["requestBody"]["content"]) == {"application/json", "application/x-www-form-urlencoded"}
    assert set(op["responses"]) == {"200", "201", "202", "204", "400", "401", "404", "409", "413", "415", "429", "503"}
    ok = {ref["$ref"].rsplit("/", 1)[1] for ref in op["responses"]["200"]["content"]["application/json"]["schema"]
          ["oneOf"]}
    assert ok == {"Accepted", "Duplicate", "Skipped", "Ignored", "SlackChallenge", "ZoomValidation", "DiscordPong"}
    assert set(op["responses"]["200"]["content"]) == {"application/json", "text/plain"}  # a trigger's own reply
    get = doc["paths"]["/hooks/{token}"]["get"]  # the handshakes' GET
    assert set(get["responses"]) == {"200", "400", "403", "404", "405", "409", "413", "429", "503"}
    assert {"hub.mode", "hub.verify_token", "hub.challenge"} <= {p["name"] for p in get["parameters"]}
    schemas = doc["components"]["schemas"]
    assert {"handshake", "reply", "verify_token_hint"} <= set(schemas["TriggerOut"]["properties"])
    assert {"handshake", "reply"} <= set(schemas["WebhookTriggerIn"]["properties"]) & set(
        schemas["TriggerPatch"]["properties"])
    kinds = {ref["$ref"].rsplit("/", 1)[1] for ref in schemas["WebhookTriggerIn"]["properties"]["handshake"]["anyOf"][0]
             ["oneOf"]}
    assert kinds == {"MetaHandshake", "EchoQueryHandshake", "ZoomHandshake", "DiscordPingHandshake", "SlackHandshake",
                     "NoHandshake"}
    assert set(op["responses"]["429"]["headers"]) == set(op["responses"]["503"]["headers"]) == {"Retry-After"}
    headers = {p["name"]: p["description"] for p in op["parameters"] if p["in"] == "header"}
    for preset in PRESETS.values():
        for name in preset.signature_headers:
            assert f"{preset.name}: signature" in headers[name], name
        for source in preset.dedupe_sources:
            if source.startswith("header:"):
                assert f"{preset.name}: dedupe key" in headers[source.removeprefix("header:")], source
        for name in preset.event_headers:
            assert f"{preset.name}: event name" in headers[name], name
    assert "github: event name" in headers["x-github-event"] and "stripe: signature" in headers["stripe-signature"]


async def test_openapi_document_is_valid_openapi_3_1_with_valid_schemas_and_resolvable_refs(client):
    definitions = pytest.importorskip("schemathesis.specs.openapi.definitions")  # the OpenAPI 3.1 meta-schema
    doc = (await client.get("/openapi.json")).json()
    errors = [f"{e.instance_path}: {e.message}"
              for e in jsonschema_rs.Draft202012Validator(definitions.OPENAPI_31).iter_errors(doc)]
    assert not errors, errors[:10]
    for schema in doc["components"]["schemas"].values():
        jsonschema_rs.meta.validate(schema)  # each a valid JSON Schema 2020-12
    refs = set(_refs(doc))
    assert refs and all(ref.removeprefix("#/components/schemas/") in doc["components"]["schemas"] for ref in refs)
    for ops in doc["paths"].values():
        for op in ops.values():
            names = [(p["name"].lower(), p["in"]) for p in op["parameters"]]
            assert len(names) == len(set(names)), op["operationId"]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [node["$ref"]] if "$ref" in node else [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


async def test_every_kind_of_webhook_answer_matches_its_documented_schema(db_url):
    async with kit.app_client(db_url, ip_bad_credential_cap=3) as (ctx, client):
        doc = (await client.get("/openapi.json")).json()
        h = await kit.hook(ctx)
        raw, headers = kit.github({"action": "opened"})
        seen = [await client.post(h.path, content=raw, headers=headers),  # accepted
                await client.post(h.path, content=raw, headers=headers),  # duplicate
                await client.post(h.path, content=b"{}", headers={"content-type": "application/json"}),  # 401
                await client.post(h.path, content=b"{", headers={"content-type": "application/json"}),  # 400
                await client.post(h.path, content=b"<x/>", headers={"content-type": "image/png"}),  # 415
                await client.post(h.path, content=b"x" * (257 * 1024), headers={"content-type": "application/json"}),
                await client.post("/hooks/awt_unknown", json={})]  # 404
        pulled = await kit.hook(ctx, pull=True, workspace="pulled")  # a pull runtime never seen: skipped
        seen.append(await client.post(pulled.path, content=raw, headers=kit.github({"action": "opened"})[1]))
        await ctx.pool.execute("UPDATE autopilot_trigger SET enabled = false WHERE id = $1", h.trigger["id"])
        ignored = kit.github({"action": "closed"})
        seen.append(await client.post(h.path, content=ignored[0], headers=ignored[1]))
        slack = await kit.hook(ctx, "slack", "slack-secret", workspace="slack")
        challenge = kit.slack_signed({"type": "url_verification", "challenge": "c1"}, "slack-secret")
        seen.append(await client.post(slack.path, content=challenge[0], headers=challenge[1]))
        seen.append(await client.post("/hooks/awt_unknown", json={}))  # a third bad credential: the cap
        seen.append(await client.post(slack.path, content=challenge[0], headers=challenge[1]))  # so 429
        bodies = [answer.json() for answer in seen]
        statuses = [(a.status_code, b.get("status", b.get("error", "challenge" if "challenge" in b else None)))
                    for a, b in zip(seen, bodies, strict=True)]
        assert statuses == [(200, "accepted"), (200, "duplicate"), (401, "rejected"), (400, "invalid_body"),
                            (415, "unsupported_media_type"), (413, "payload_too_large"), (404, "not_found"),
                            (200, "skipped"), (200, "ignored"), (200, "challenge"), (404, "not_found"),
                            (429, "rate_limited")], bodies
        for answer in seen:
            _answers_as_documented(doc, "/hooks/{token}", answer)


async def test_validation_errors_are_422_json_not_stack_traces(client):
    w = await factories.world(client._transport.app.state.ctx)  # type: ignore[attr-defined]
    for body in ({"title": 5}, [], {"assignee": {"type": "robot"}}, {"title": "x" * 600}):
        answer = await client.post("/v1/autopilots", headers=w.auth, json=body)
        assert answer.status_code == 422, body
        assert answer.json()["error"] == "invalid_request" and "Traceback" not in answer.text
    nul = await client.post("/v1/agents", headers=w.auth, json={"name": "a\u0000b", "runtime": {"kind": "pull"}})
    assert nul.status_code == 422 and nul.json()["error"] == "invalid_request"


async def _schemathesis(live_url: str, token: str, tmp_path: Path, *selection: str) -> str:
    """``st run`` over the served document with ``token`` as bearer; its output (asserts it passed)."""
    command = [str(ST if ST.exists() else shutil.which("st")), "run", f"{live_url}/openapi.json",
               "--header", f"Authorization: Bearer {token}",
               "--checks", "not_a_server_error,response_schema_conformance",
               "--max-examples", "5", "--seed", "7", "--phases", "examples,coverage,fuzzing",
               "--generation-database", "none", "--request-timeout", "10", "--no-color", *selection]
    proc = await asyncio.create_subprocess_exec(
        *command, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
    output, _ = await asyncio.wait_for(proc.communicate(), 110)
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text[-6000:]
    assert "Authentication failed" not in text and " passed" in text, text[-6000:]
    return text


@pytest.mark.slow
@pytest.mark.skipif(not ST.exists() and shutil.which("st") is None, reason="schemathesis is not installed")
async def test_schemathesis_finds_no_server_errors_and_no_schema_drift(ctx, live_url, tmp_path):
    from gateway import admin

    w = await factories.world(ctx)
    agent = await factories.http_agent(w)
    await factories.autopilot(w, agent.row["id"])
    # Revoking keys is covered by its own tests; here it would revoke the key the run uses.
    text = await _schemathesis(live_url, w.api_key, tmp_path, "--exclude-operation-id", "revoke_key",
                               "--exclude-tag", "runtime", "--exclude-tag", "webhooks")
    assert f"Tested: {len(admin.ENDPOINTS) - 1}" in text, text[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(not ST.exists() and shutil.which("st") is None, reason="schemathesis is not installed")
async def test_schemathesis_finds_no_server_errors_and_no_schema_drift_in_the_runtime_api(ctx, live_url, tmp_path):
    w = await factories.world(ctx)
    agent = await factories.pull_agent(w, max_concurrency=8)
    pilot = await factories.autopilot(w, agent.row["id"], mode="create_issue", instructions="do it")
    async with ctx.pool.acquire() as conn:  # tasks waiting: claims answer 200 with a task, not only 204
        for n in range(3):
            await factories.dispatched_run(conn, pilot["id"], {"n": n})
    text = await _schemathesis(live_url, agent.runtime_token, tmp_path, "--include-tag", "runtime")
    assert "Tested: 4" in text, text[-3000:]
    assert await ctx.pool.fetchval("SELECT count(*) FROM agent_task WHERE lease_token IS NOT NULL") > 0
