"""Runs through the API: admission and attribution, Idempotency-Key, the causal chain, listing, cancel."""

from __future__ import annotations

import asyncio

from hookgate import database


async def _listen(ctx, channel):
    heard: asyncio.Queue[str] = asyncio.Queue()
    conn = await database.connect(ctx.dsn)
    await conn.add_listener(channel, lambda *args: heard.put_nowait(args[3]))
    return conn, heard


async def _start(client, team, role="owner", key=None, **body):
    headers = team.h(role) | ({"Idempotency-Key": key} if key else {})
    return await client.post(f"/v1/autopilots/{team.autopilot_id}/runs", headers=headers, json=body)


async def test_a_manual_run_records_its_clicker_and_wakes_the_workers(client, team, ctx):
    listener, heard = await _listen(ctx, "hookgate_runs")
    try:
        made = await _start(client, team, "collaborator", payload={"ticket": 42})
        assert made.status_code == 201
        body = made.json()
        assert (body["status"], body["source"]) == ("pending", "manual")
        assert body["originator_id"] == body["accountable_id"] == str(team.ids["collaborator"])
        assert await asyncio.wait_for(heard.get(), 5) == body["run_id"]
    finally:
        await listener.close()
    run = (await client.get(f"/v1/runs/{body['run_id']}", headers=team.h("member"))).json()
    assert run["originator_id"] == str(team.ids["collaborator"]) and run["source"] == "manual"
    assert run["payload"]["payload"] == {"ticket": 42} and run["payload"]["event"] == "autopilot.manual"
    assert run["rule_version_id"] is not None


async def test_an_api_run_has_no_originator_and_is_accountable_to_the_rule_publisher(client, team):
    await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=team.h("admin"), json={"title": "by admin"})
    body = (await _start(client, team, "collaborator", source="api")).json()
    assert body["originator_id"] is None and body["accountable_id"] == str(team.ids["admin"])


async def test_a_run_the_gate_refuses_is_created_skipped_with_its_reason(client, team, ctx):
    await client.post(f"/v1/autopilots/{team.autopilot_id}/pause", headers=team.h("owner"))
    made = await _start(client, team)
    assert made.status_code == 201
    assert (made.json()["status"], made.json()["reason_code"]) == ("skipped", "autopilot_paused")
    assert made.json()["reason"] == "the autopilot is paused"


async def test_same_idempotency_key_replays_the_same_response_and_a_different_body_is_422(client, team, conn):
    first = await _start(client, team, key="k-1", payload={"a": 1})
    again = await _start(client, team, key="k-1", payload={"a": 1})
    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    other = await _start(client, team, key="k-1", payload={"a": 2})
    assert other.status_code == 422 and other.json()["error"] == "idempotency_key_reused"
    fresh = await _start(client, team, key="k-2", payload={"a": 1})
    assert fresh.json()["run_id"] != first.json()["run_id"]
    assert await conn.fetchval("SELECT count(*) FROM autopilot_run") == 2


async def test_an_idempotency_key_older_than_five_minutes_starts_a_new_run(client, team, conn):
    first = (await _start(client, team, key="k")).json()
    await conn.execute("UPDATE idempotency_key SET created_at = created_at - interval '5 minutes 1 second'")
    second = (await _start(client, team, key="k")).json()
    assert second["run_id"] != first["run_id"]
    third = (await _start(client, team, key="k")).json()
    assert third == second


async def test_concurrent_requests_with_one_key_make_one_run(client, team, conn):
    answers = await asyncio.gather(*(_start(client, team, key="race", payload={"n": 1}) for _ in range(8)))
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()["run_id"] for a in answers}) == 1
    assert await conn.fetchval("SELECT count(*) FROM autopilot_run") == 1


async def test_idempotency_keys_are_scoped_by_workspace_and_path(client, team, conn):
    other_ap = (await client.post("/v1/autopilots", headers=team.h("owner"), json={
        "title": "second", "assignee": {"type": "agent", "id": team.agent_id}})).json()
    one = (await _start(client, team, key="same")).json()
    two = await client.post(f"/v1/autopilots/{other_ap['id']}/runs", headers=team.h("owner") | {
        "Idempotency-Key": "same"}, json={})
    assert two.status_code == 201 and two.json()["run_id"] != one["run_id"]


async def test_get_run_shows_the_chain_from_delivery_to_task(client, team, conn):
    run_id = (await _start(client, team)).json()["run_id"]
    issue = await conn.fetchval(
        "INSERT INTO issue (workspace_id, autopilot_id, run_id, title, status) VALUES ($1, $2, $3, 't', 'in_progress')"
        " RETURNING id", team.world.workspace_id, team.autopilot_id, run_id)
    task = await conn.fetchval(
        "INSERT INTO agent_task (workspace_id, run_id, issue_id, agent_id, status, attempt, idempotency_key, error)"
        " VALUES ($1, $2, $3, $4, 'failed', 2, 'run:x:1', 'agent answered 500') RETURNING id",
        team.world.workspace_id, run_id, issue, team.agent_id)
    await conn.execute("UPDATE autopilot_run SET issue_id = $2, task_id = $3, status = 'running' WHERE id = $1",
                       run_id, issue, task)
    chain = (await client.get(f"/v1/runs/{run_id}", headers=team.h("owner"))).json()["chain"]
    assert chain["delivery"] is None
    assert chain["run"] == {"id": run_id, "status": "running", "reason_code": None, "reason": None}
    assert chain["issue"]["status"] == "in_progress"
    assert chain["task"] == {"id": str(task), "status": "failed", "reason_code": None, "reason": "agent answered 500"}


async def test_list_runs_filters_and_pages_newest_first(client, team):
    made = [(await _start(client, team, source=s)).json()["run_id"] for s in ("manual", "api", "manual")]
    page1 = (await client.get("/v1/runs", headers=team.h("member"), params={"limit": 2})).json()
    assert [r["id"] for r in page1["items"]] == made[::-1][:2] and page1["next_cursor"]
    page2 = (await client.get("/v1/runs", headers=team.h("member"),
                              params={"limit": 2, "cursor": page1["next_cursor"]})).json()
    assert [r["id"] for r in page2["items"]] == [made[0]] and page2["next_cursor"] is None
    api_only = (await client.get("/v1/runs", headers=team.h("member"), params={"source": "api"})).json()
    assert [r["id"] for r in api_only["items"]] == [made[1]]
    bad = await client.get("/v1/runs", headers=team.h("member"), params={"cursor": "!!nope"})
    too_big = await client.get("/v1/runs", headers=team.h("member"), params={"limit": 501})
    assert (bad.status_code, bad.json()["error"], too_big.status_code) == (400, "invalid_cursor", 422)


async def test_cancel_ends_the_run_and_its_queued_task_once(client, team, conn):
    run_id = (await _start(client, team)).json()["run_id"]
    task = await conn.fetchval(
        "INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key) VALUES ($1, $2, $3, 'run:c:1')"
        " RETURNING id", team.world.workspace_id, run_id, team.agent_id)
    denied = await client.post(f"/v1/runs/{run_id}/cancel", headers=team.h("member"), json={})
    cancelled = await client.post(f"/v1/runs/{run_id}/cancel", headers=team.h("collaborator"), json={"reason": "dup"})
    assert denied.status_code == 403
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["reason"] == "dup" and cancelled.json()["finished_at"]
    assert await conn.fetchval("SELECT status FROM agent_task WHERE id = $1", task) == "cancelled"
    audit = (await client.get("/v1/audit", headers=team.h("owner"), params={"subject_id": run_id})).json()
    assert [a["action"] for a in audit["items"]] == ["RUN_CANCEL"]
    assert audit["items"][0]["detail"] == {"previous_status": "pending", "tasks_cancelled": 1}
    again = await client.post(f"/v1/runs/{run_id}/cancel", headers=team.h("owner"), json={})
    assert again.status_code == 409 and again.json()["error"] == "run_finished"
