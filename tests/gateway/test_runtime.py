import asyncio

from tests import factories
from tests.factories import bearer


async def _pull(ctx, conn, n=1):
    w = await factories.world(ctx)
    agent = await factories.pull_agent(w, max_concurrency=8)
    ap = await factories.autopilot(w, agent.row["id"], mode="create_issue", instructions="do it")
    runs = [await factories.dispatched_run(conn, ap["id"], {"k": "v"}) for _ in range(n)]
    return w, agent, ap, runs


async def test_heartbeat_marks_the_instance_online(ctx, conn, client):
    _, agent, _, _ = await _pull(ctx, conn, n=0)
    r = await client.post("/v1/runtime/heartbeat", json={"instance": "box-1"},
                          headers=bearer(agent.runtime_token))
    assert r.status_code == 200 and r.json()["status"] == "online"
    row = await conn.fetchrow("SELECT * FROM agent_instance WHERE agent_id = $1", agent.row["id"])
    assert row["instance"] == "box-1" and row["status"] == "online"


async def test_runtime_api_refuses_missing_or_unknown_tokens(ctx, conn, client):
    await _pull(ctx, conn, n=0)
    assert (await client.post("/v1/runtime/claim")).status_code == 401
    bad = await client.post("/v1/runtime/claim", headers=bearer("hgr_" + "x" * 43))
    assert bad.status_code == 401 and bad.json()["error"] == "unauthorized"


async def test_claim_returns_the_contract_shape_then_204_when_nothing_is_left(ctx, conn, client):
    _, agent, ap, [run_id] = await _pull(ctx, conn)
    r = await client.post("/v1/runtime/claim", json={"wait_s": 0}, headers=bearer(agent.runtime_token))
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"task", "lease_token", "lease_expires_at"}
    assert set(body["task"]) == {"id", "run_id", "attempt", "payload", "autopilot"}
    assert body["task"]["run_id"] == str(run_id) and body["task"]["attempt"] == 1
    assert body["task"]["autopilot"] == {"id": str(ap["id"]), "title": "triage", "instructions": "do it"}
    assert body["task"]["payload"] == {"k": "v"}
    empty = await client.post("/v1/runtime/claim", json={"wait_s": 0}, headers=bearer(agent.runtime_token))
    assert empty.status_code == 204


async def test_claim_long_polls_until_work_arrives(ctx, conn, client):
    _, agent, ap, _ = await _pull(ctx, conn, n=0)

    async def later():
        await asyncio.sleep(0.3)
        async with ctx.pool.acquire() as c:
            await factories.dispatched_run(c, ap["id"])

    loop = asyncio.get_running_loop()
    start = loop.time()
    maker = asyncio.create_task(later())
    r = await client.post("/v1/runtime/claim", json={"wait_s": 5}, headers=bearer(agent.runtime_token))
    await maker
    assert r.status_code == 200 and 0.3 <= loop.time() - start < 2


async def test_renew_report_repeat_and_stale_token(ctx, conn, client):
    _, agent, _, [run_id] = await _pull(ctx, conn)
    auth = bearer(agent.runtime_token)
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
    claimed = (await client.post("/v1/runtime/claim", headers=bearer(agent.runtime_token))).json()
    url = f"/v1/runtime/tasks/{claimed['task']['id']}/report"
    report = {"lease_token": claimed["lease_token"], "status": "succeeded"}
    assert (await client.post(url, json=report)).status_code == 401
    w2 = await factories.world(ctx, "other")
    stranger = await factories.pull_agent(w2)
    assert (await client.post(url, json=report, headers=bearer(stranger.runtime_token))).status_code == 404
    bad = await client.post(url, json={"status": "succeeded"}, headers=bearer(agent.runtime_token))
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_request"


# --- retries and attempts of a pull task ----------------------------------------------------------------------


async def _pull_with_schedule(ctx, conn, client, schedule):
    """A pull agent made through the API with its own retry schedule, online, and one dispatched run."""
    w = await factories.world(ctx)
    made = await client.post("/v1/agents", headers=w.auth,
                             json={"name": "puller", "runtime": {"kind": "pull"}, "retry_schedule": schedule})
    assert made.status_code == 201, made.text
    agent = made.json()
    auth = bearer(agent["runtime_token"])
    assert (await client.post("/v1/runtime/heartbeat", headers=auth, json={})).status_code == 200
    ap = await factories.autopilot(w, agent["id"])
    return w, auth, await factories.dispatched_run(conn, ap["id"])


async def _attempt_rows(conn, task_id):
    return await conn.fetch("SELECT * FROM task_attempt WHERE task_id = $1 ORDER BY id", task_id)


async def test_a_transient_failure_waits_the_agents_delay_then_the_last_attempt_fails_for_good(ctx, conn, client):
    w, auth, run_id = await _pull_with_schedule(ctx, conn, client, [30])
    claimed = (await client.post("/v1/runtime/claim", headers=auth, json={})).json()
    task_id = claimed["task"]["id"]
    assert await conn.fetchval("SELECT max_attempts FROM agent_task WHERE id = $1", task_id) == 2
    failed = {"lease_token": claimed["lease_token"], "status": "failed", "error": "disk full",
              "retry_class": "transient"}
    first = await client.post(f"/v1/runtime/tasks/{task_id}/report", headers=auth, json=failed)
    assert first.status_code == 200 and first.json()["status"] == "queued", first.text
    task = await conn.fetchrow("SELECT *, extract(epoch FROM available_at - now()) AS wait FROM agent_task "
                               "WHERE id = $1", task_id)
    assert task["status"] == "queued" and task["attempt"] == 1 and 27 <= float(task["wait"]) <= 33
    assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "queued"
    [row] = await _attempt_rows(conn, task_id)
    assert (row["attempt"], row["outcome"], row["error"], row["http_status"]) == (1, "failed", "disk full", None)
    assert row["duration_ms"] >= 0 and row["finished_at"] >= row["started_at"]
    shown = (await client.get(f"/v1/runs/{run_id}", headers=w.auth)).json()
    assert (shown["status"], shown["attempt"], shown["last_error"]) == ("queued", 1, "disk full")
    assert shown["next_attempt_at"] is not None and shown["latest_attempt"]["outcome"] == "failed"
    # Not before its time.
    assert (await client.post("/v1/runtime/claim", headers=auth, json={})).status_code == 204
    await conn.execute("UPDATE agent_task SET available_at = now() WHERE id = $1", task_id)
    again = (await client.post("/v1/runtime/claim", headers=auth, json={})).json()
    assert (again["task"]["id"], again["task"]["attempt"]) == (task_id, 2)
    last = await client.post(f"/v1/runtime/tasks/{task_id}/report", headers=auth,
                             json=failed | {"lease_token": again["lease_token"], "error": "disk still full"})
    assert last.status_code == 200 and last.json()["status"] == "failed", last.text
    task = await conn.fetchrow("SELECT * FROM agent_task WHERE id = $1", task_id)
    assert (task["status"], task["attempt"], task["error"]) == ("failed", 2, "disk still full")
    assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "failed"
    rows = await _attempt_rows(conn, task_id)
    assert [(r["attempt"], r["outcome"], r["error"]) for r in rows] == [(1, "failed", "disk full"),
                                                                        (2, "failed", "disk still full")]
    listed = (await client.get(f"/v1/tasks/{task_id}/attempts", headers=w.auth)).json()["items"]
    assert [i["outcome"] for i in listed] == ["failed", "failed"] and listed[0]["response_body"] is None


async def test_a_succeeded_report_records_a_succeeded_attempt(ctx, conn, client):
    w, auth, run_id = await _pull_with_schedule(ctx, conn, client, [5])
    claimed = (await client.post("/v1/runtime/claim", headers=auth, json={})).json()
    task_id = claimed["task"]["id"]
    done = await client.post(f"/v1/runtime/tasks/{task_id}/report", headers=auth,
                             json={"lease_token": claimed["lease_token"], "status": "succeeded", "result": {"ok": 1}})
    assert done.status_code == 200 and done.json()["status"] == "succeeded"
    repeat = await client.post(f"/v1/runtime/tasks/{task_id}/report", headers=auth,
                               json={"lease_token": claimed["lease_token"], "status": "succeeded", "result": {"ok": 1}})
    assert repeat.status_code == 200 and repeat.json()["applied"] is False
    [row] = await _attempt_rows(conn, task_id)  # the repeat records nothing
    assert (row["attempt"], row["outcome"], row["error"]) == (1, "succeeded", None)
    assert row["duration_ms"] >= 0 and str(row["run_id"]) == str(run_id)
    # The attempt started when the claim was won (not when the report came).
    claimed_at = await conn.fetchval("SELECT at FROM audit_log WHERE action = 'CLAIM' AND subject_id = $1",
                                     task_id)
    assert row["started_at"] == claimed_at < row["finished_at"]
    shown = (await client.get(f"/v1/runs/{run_id}", headers=w.auth)).json()
    assert (shown["status"], shown["attempt"], shown["next_attempt_at"]) == ("completed", 1, None)
    assert shown["latest_attempt"]["outcome"] == "succeeded"


async def test_a_permanent_failure_is_not_retried_and_records_one_failed_attempt(ctx, conn, client):
    _, auth, _ = await _pull_with_schedule(ctx, conn, client, [5])
    claimed = (await client.post("/v1/runtime/claim", headers=auth, json={})).json()
    task_id = claimed["task"]["id"]
    done = await client.post(f"/v1/runtime/tasks/{task_id}/report", headers=auth,
                             json={"lease_token": claimed["lease_token"], "status": "failed", "error": "bad input"})
    assert done.status_code == 200 and done.json()["status"] == "failed"
    assert [(r["outcome"], r["error"]) for r in await _attempt_rows(conn, task_id)] == [("failed", "bad input")]
