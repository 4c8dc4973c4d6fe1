import asyncio

from autopilot import admission, dispatch
from tests import factories


async def _pull(ctx, conn, n=1):
    w = await factories.world(ctx)
    agent = await factories.pull_agent(w, max_concurrency=8)
    ap = await factories.autopilot(w, agent.row["id"], mode="create_issue", instructions="do it")
    runs = []
    for _ in range(n):
        adm = await admission.admit(conn, autopilot_id=ap["id"], source="api", payload={"k": "v"},
                                    heartbeat_timeout_s=120.0)
        await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0))
        runs.append(adm.run_id)
    return w, agent, ap, runs


def _auth(token):
    return {"Authorization": f"Bearer {token}"}


async def test_heartbeat_marks_the_instance_online(ctx, conn, client):
    _, agent, _, _ = await _pull(ctx, conn, n=0)
    r = await client.post("/v1/runtime/heartbeat", json={"instance": "box-1"}, headers=_auth(agent.runtime_token))
    assert r.status_code == 200 and r.json()["status"] == "online"
    row = await conn.fetchrow("SELECT * FROM agent_instance WHERE agent_id = $1", agent.row["id"])
    assert row["instance"] == "box-1" and row["status"] == "online"


async def test_runtime_api_refuses_missing_or_unknown_tokens(ctx, conn, client):
    await _pull(ctx, conn, n=0)
    assert (await client.post("/v1/runtime/claim")).status_code == 401
    bad = await client.post("/v1/runtime/claim", headers=_auth("hgr_" + "x" * 43))
    assert bad.status_code == 401 and bad.json()["error"] == "unauthorized"


async def test_claim_returns_the_contract_shape_then_204_when_nothing_is_left(ctx, conn, client):
    _, agent, ap, [run_id] = await _pull(ctx, conn)
    r = await client.post("/v1/runtime/claim", json={"wait_s": 0}, headers=_auth(agent.runtime_token))
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"task", "lease_token", "lease_expires_at"}
    assert set(body["task"]) == {"id", "run_id", "attempt", "payload", "autopilot"}
    assert body["task"]["run_id"] == str(run_id) and body["task"]["attempt"] == 1
    assert body["task"]["autopilot"] == {"id": str(ap["id"]), "title": "triage", "instructions": "do it"}
    assert body["task"]["payload"] == {"k": "v"}
    empty = await client.post("/v1/runtime/claim", json={"wait_s": 0}, headers=_auth(agent.runtime_token))
    assert empty.status_code == 204


async def test_claim_long_polls_until_work_arrives(ctx, conn, client):
    _, agent, ap, _ = await _pull(ctx, conn, n=0)

    async def later():
        await asyncio.sleep(0.3)
        async with ctx.pool.acquire() as c:
            adm = await admission.admit(c, autopilot_id=ap["id"], source="api", payload={}, heartbeat_timeout_s=120.0)
            await dispatch.dispatch_run(c, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0))

    loop = asyncio.get_running_loop()
    start = loop.time()
    maker = asyncio.create_task(later())
    r = await client.post("/v1/runtime/claim", json={"wait_s": 5}, headers=_auth(agent.runtime_token))
    await maker
    assert r.status_code == 200 and 0.3 <= loop.time() - start < 2


async def test_renew_report_repeat_and_stale_token(ctx, conn, client):
    _, agent, _, [run_id] = await _pull(ctx, conn)
    auth = _auth(agent.runtime_token)
    claimed = (await client.post("/v1/runtime/claim", headers=auth)).json()
    task_id, token = claimed["task"]["id"], claimed["lease_token"]
    renewed = await client.post(f"/v1/runtime/tasks/{task_id}/renew", json={"lease_token": token}, headers=auth)
    assert renewed.status_code == 200 and renewed.json()["lease_expires_at"] >= claimed["lease_expires_at"]
    report = {"lease_token": token, "status": "succeeded", "result": {"ok": 1}}
    first = await client.post(f"/v1/runtime/tasks/{task_id}/report", json=report, headers=auth)
    again = await client.post(f"/v1/runtime/tasks/{task_id}/report", json=report, headers=auth)
    assert first.status_code == again.status_code == 200
    assert first.json()["applied"] is True and again.json()["applied"] is False
    stale = await client.post(f"/v1/runtime/tasks/{task_id}/report",
                              json=report | {"lease_token": "00000000-0000-4000-8000-000000000000"}, headers=auth)
    assert stale.status_code == 409 and stale.json()["error"] == "lease_lost"
    renew_late = await client.post(f"/v1/runtime/tasks/{task_id}/renew", json={"lease_token": token}, headers=auth)
    assert renew_late.status_code == 409
    run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
    assert run["status"] == "completed"
    assert await conn.fetchval("SELECT count(*) FROM audit_log WHERE action = 'LATE_RESULT'") == 2


async def test_a_pull_task_needs_its_own_agents_bearer(ctx, conn, client):
    _, agent, _, _ = await _pull(ctx, conn)
    claimed = (await client.post("/v1/runtime/claim", headers=_auth(agent.runtime_token))).json()
    url = f"/v1/runtime/tasks/{claimed['task']['id']}/report"
    report = {"lease_token": claimed["lease_token"], "status": "succeeded"}
    assert (await client.post(url, json=report)).status_code == 401
    w2 = await factories.world(ctx, "other")
    stranger = await factories.pull_agent(w2)
    assert (await client.post(url, json=report, headers=_auth(stranger.runtime_token))).status_code == 404
    bad = await client.post(url, json={"status": "succeeded"}, headers=_auth(agent.runtime_token))
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_request"
