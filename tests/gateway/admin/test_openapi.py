"""The OpenAPI document is generated from the models, and schemathesis finds no 5xx and no schema drift."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests import factories

ST = Path(sys.executable).with_name("st")


async def test_openapi_document_describes_every_admin_route(client):
    from gateway import admin

    doc = (await client.get("/openapi.json")).json()
    assert doc["openapi"] == "3.1.0" and doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    assert documented == {(e.method, e.path) for e in admin.ENDPOINTS}
    operation_ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(operation_ids) == len(set(operation_ids)) == len(admin.ENDPOINTS)
    create = doc["paths"]["/v1/autopilots/{autopilot_id}/runs"]["post"]
    assert set(create["responses"]) == {"201", "400", "401", "403", "404", "409", "413", "422"}
    assert any(p["name"] == "Idempotency-Key" for p in create["parameters"])
    runs = doc["paths"]["/v1/runs"]["get"]["parameters"]
    assert {p["name"] for p in runs} == {"limit", "cursor", "autopilot_id", "status", "source"}
    schema = doc["components"]["schemas"]["RunDetail"]
    assert {"chain", "originator_id", "accountable_id", "rule_version_id"} <= set(schema["properties"])


async def test_validation_errors_are_422_json_not_stack_traces(client):
    w = await factories.world(client._transport.app.state.ctx)  # type: ignore[attr-defined]
    for body in ({"title": 5}, [], {"assignee": {"type": "robot"}}, {"title": "x" * 600}):
        answer = await client.post("/v1/autopilots", headers=w.auth, json=body)
        assert answer.status_code == 422, body
        assert answer.json()["error"] == "invalid_request" and "Traceback" not in answer.text
    nul = await client.post("/v1/agents", headers=w.auth, json={"name": "a\u0000b", "runtime": {"kind": "pull"}})
    assert nul.status_code == 422 and nul.json()["error"] == "invalid_request"


@pytest.mark.slow
@pytest.mark.skipif(not ST.exists() and shutil.which("st") is None, reason="schemathesis is not installed")
async def test_schemathesis_finds_no_server_errors_and_no_schema_drift(ctx, live_url, tmp_path):
    w = await factories.world(ctx)
    agent = await factories.http_agent(w)
    await factories.autopilot(w, agent.row["id"])
    command = [str(ST if ST.exists() else shutil.which("st")), "run", f"{live_url}/openapi.json",
               "--header", f"Authorization: Bearer {w.api_key}",
               "--checks", "not_a_server_error,response_schema_conformance",
               "--max-examples", "5", "--seed", "7", "--phases", "examples,coverage,fuzzing",
               "--generation-database", "none", "--request-timeout", "10", "--no-color",
               # Revoking keys is covered by its own tests; here it would revoke the key the run uses.
               "--exclude-operation-id", "revoke_key"]
    proc = await asyncio.create_subprocess_exec(
        *command, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
    output, _ = await asyncio.wait_for(proc.communicate(), 110)
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text[-6000:]
    assert "Authentication failed" not in text, text[-6000:]
    from gateway import admin

    assert " passed" in text and f"Tested: {len(admin.ENDPOINTS) - 1}" in text, text[-3000:]
