"""No token, key or secret appears in a real gateway's log output or in any error response.

Complements ``tests/ops/test_logs.py`` (redaction of single log records) with a representative run of a
``hookgate gateway`` process at debug level: everything created through the API, deliveries, unknown and
rotated tokens (also in query strings), bad bearers, runtime claims and stale reports.
"""

from __future__ import annotations

import httpx

from tests.security import estate


async def _representative_calls(http: httpx.AsyncClient, made: estate.Estate) -> list[httpx.Response]:
    hook = next(s for s in made.secrets if s.startswith("awt_"))
    runtime = {"authorization": "Bearer " + next(s for s in made.secrets if s.startswith("hgr_"))}
    calls = [
        http.post(f"/hooks/{hook}?sig={made.secrets[0]}", json={"a": 1}),  # unsigned: 401
        http.post(f"/hooks/{hook[:-1]}x", json={"a": 1}),  # unknown: 404
        http.get("/v1/me", headers={"authorization": f"Bearer {made.secrets[1]}x"}),  # bad key: 401
        http.get(f"/v1/triggers/{made.ids['trigger_id']}?token={hook}", headers=made.auth),
        http.post(f"/v1/triggers/{made.ids['trigger_id']}/rotate-token", headers=made.auth),
        http.post(f"/hooks/{hook}", json={"a": 1}),  # the old token after rotation: 404
        http.post("/v1/runtime/claim", headers=runtime, json={"wait_s": 0}),
        http.post(f"/v1/runtime/tasks/{made.ids['task_id']}/report", headers=runtime,
                  json={"lease_token": "00000000-0000-0000-0000-000000000000", "status": "succeeded"}),
        http.post("/v1/runtime/claim", headers={"authorization": runtime["authorization"] + "x"}, json={}),
        http.put(f"/v1/triggers/{made.ids['trigger_id']}/signing-secret", headers=made.auth, json={"secret": "x"}),
    ]
    return [await call for call in calls]


async def test_a_representative_run_logs_no_secret_and_no_error_carries_one(ctx, spawn):
    gateway = spawn.start("gateway", gateway=True, extra_env={"HOOKGATE_LOG_LEVEL": "debug"})
    gateway.wait_ready()
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        made = await estate.build(ctx, http, "acme")
        answers = await _representative_calls(http, made)
    assert {a.status_code for a in answers} >= {401, 404, 200}
    output = gateway.output()
    assert output.strip(), "the gateway logged nothing at debug level"
    for secret in made.secrets:
        assert secret not in output, f"{secret[:4]}… in the gateway's log"
        for answer in answers:
            if answer.status_code >= 400:
                assert secret not in answer.text, (answer.request.url.path, answer.text)
