"""Retrying a run through the API: who may, which runs, one task per retry, Idempotency-Key, the issue."""

from __future__ import annotations

import asyncio

from autopilot import dispatch
from hookgate import database
from tests import pushes
from tests.gateway.admin.conftest import hookgate

OPTIONS = dispatch.Options(heartbeat_timeout_s=120.0)


async def _ended_run(client, team, conn, status="failed", autopilot_id=None):
    """A dispatched run (task run:<id>:1) whose task and run ended ``status`` (failed or cancelled)."""
    made = await client.post(f"/v1/autopilots/{autopilot_id or team.autopilot_id}/runs", headers=team.h("owner"),
                             json={})
    run_id = made.json()["run_id"]
    await dispatch.dispatch_run(conn, run_id, OPTIONS)
    await conn.execute("UPDATE agent_task SET status = $2, finished_at = now() WHERE run_id = $1", run_id, status)
    await conn.execute("UPDATE autopilot_run SET status = $2, reason_code = 'task_failed', reason = 'boom',"
                       " finished_at = now() WHERE id = $1", run_id, status)
    return run_id


def _retry(client, team, run_id, role="owner", key=None):
    headers = team.h(role) | ({"Idempotency-Key": key} if key else {})
    return client.post(f"/v1/runs/{run_id}/retry", headers=headers)


async def test_retry_makes_the_runs_next_task_queues_the_run_audits_and_wakes_the_workers(client, team, conn, ctx):
    run_id = await _ended_run(client, team, conn)
    listener = await database.connect(ctx.dsn)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("hookgate_tasks", lambda *args: heard.put_nowait(args[3]))
    try:
        answer = await _retry(client, team, run_id, "collaborator")
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert await asyncio.wait_for(heard.get(), 5) == body["task_id"]
    finally:
        await listener.close()
    assert set(body) == {"run_id", "task_id", "attempt"}
    assert (body["run_id"], body["attempt"]) == (run_id, 2)
    task = await conn.fetchrow("SELECT * FROM agent_task WHERE id = $1", body["task_id"])
    assert (task["idempotency_key"], task["status"], str(task["agent_id"])) == (f"run:{run_id}:2", "queued",
                                                                              team.agent_id)
    assert task["max_attempts"] == ctx.settings.retry_schedule.attempts
    run = (await client.get(f"/v1/runs/{run_id}", headers=team.h("member"))).json()
    assert (run["status"], run["task_id"], run["finished_at"]) == ("queued", body["task_id"], None)
    assert (run["reason_code"], run["reason"]) == (None, None)
    audit = (await client.get("/v1/audit", headers=team.h("owner"), params={"subject_id": run_id})).json()
    retry = [a for a in audit["items"] if a["action"] == "RETRY"]
    assert len(retry) == 1 and retry[0]["actor_id"] == str(team.ids["collaborator"])
    assert retry[0]["detail"]["attempt"] == 2 and retry[0]["detail"]["previous_status"] == "failed"
    # Cancelled, then retried again: the key scheme continues.
    assert (await client.post(f"/v1/runs/{run_id}/cancel", headers=team.h("owner"), json={})).status_code == 200
    third = await _retry(client, team, run_id)
    assert third.status_code == 202 and third.json()["attempt"] == 3
    keys = [r["idempotency_key"] for r in await conn.fetch(
        "SELECT idempotency_key FROM agent_task WHERE run_id = $1 ORDER BY idempotency_key", run_id)]
    assert keys == [f"run:{run_id}:1", f"run:{run_id}:2", f"run:{run_id}:3"]


async def test_retry_refuses_anonymous_members_other_workspaces_and_unknown_runs(client, team, conn):
    run_id = await _ended_run(client, team, conn)
    anonymous = await client.post(f"/v1/runs/{run_id}/retry")
    member = await _retry(client, team, run_id, "member")
    outsider = await _retry(client, team, run_id, "outsider")
    unknown = await _retry(client, team, "0190e0a0-0000-7000-8000-000000000000")
    not_a_uuid = await client.post("/v1/runs/nope/retry", headers=team.h("owner"))
    assert (anonymous.status_code, anonymous.json()["error"]) == (401, "unauthorized")
    assert (member.status_code, member.json()["error"]) == (403, "forbidden")
    assert outsider.status_code == unknown.status_code == 404
    assert outsider.json() == unknown.json() == {"error": "not_found", "message": "no such run"}
    assert not_a_uuid.status_code in (404, 422) and "error" in not_a_uuid.json()
    assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 1


async def test_only_a_failed_or_cancelled_run_is_retried(client, team, conn):
    for status in ("completed", "skipped"):
        run_id = await _ended_run(client, team, conn)
        await conn.execute("UPDATE autopilot_run SET status = $2 WHERE id = $1", run_id, status)
        refused = await _retry(client, team, run_id)
        assert (refused.status_code, refused.json()["error"]) == (409, "run_not_retryable"), status
    pending = (await client.post(f"/v1/autopilots/{team.autopilot_id}/runs", headers=team.h("owner"),
                                 json={})).json()["run_id"]
    refused = await _retry(client, team, pending)
    assert (refused.status_code, refused.json()["error"]) == (409, "run_not_retryable")
    assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", pending) == 0


async def test_retry_is_refused_when_the_assignee_resolves_to_an_archived_agent(client, team, conn):
    run_id = await _ended_run(client, team, conn)
    await conn.execute("UPDATE agent SET archived_at = now() WHERE id = $1", team.agent_id)
    refused = await _retry(client, team, run_id)
    assert (refused.status_code, refused.json()["error"]) == (409, "agent_archived")
    assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "failed"


async def test_concurrent_retries_of_one_run_make_one_task(client, team, conn):
    run_id = await _ended_run(client, team, conn)
    answers = await asyncio.gather(*(_retry(client, team, run_id) for _ in range(6)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [202] + [409] * 5, [a.text for a in answers]
    assert {a.json()["error"] for a in answers if a.status_code == 409} == {"run_not_retryable"}
    assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 2


async def test_the_same_idempotency_key_replays_the_first_retry(client, team, conn):
    run_id = await _ended_run(client, team, conn)
    answers = await asyncio.gather(*(_retry(client, team, run_id, key="again") for _ in range(4)))
    assert {a.status_code for a in answers} == {202}
    assert len({a.json()["task_id"] for a in answers}) == 1
    assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 2


async def test_a_create_issue_run_keeps_its_issue_and_a_cancelled_issue_is_reopened(client, team, conn):
    made = await client.post("/v1/autopilots", headers=team.h("owner"), json={
        "title": "with issue", "assignee": {"type": "agent", "id": team.agent_id}, "execution_mode": "create_issue"})
    run_id = await _ended_run(client, team, conn, autopilot_id=made.json()["id"])
    issue_id = await conn.fetchval("SELECT issue_id FROM autopilot_run WHERE id = $1", run_id)
    patched = await client.patch(f"/v1/issues/{issue_id}", headers=team.h("owner"), json={"status": "cancelled"})
    assert patched.status_code == 200, patched.text
    answer = await _retry(client, team, run_id)
    assert answer.status_code == 202
    task = await conn.fetchrow("SELECT * FROM agent_task WHERE id = $1", answer.json()["task_id"])
    assert task["issue_id"] == issue_id
    assert await conn.fetchval("SELECT status FROM issue WHERE id = $1", issue_id) == "todo"
    assert await conn.fetchval("SELECT count(*) FROM issue WHERE run_id = $1", run_id) == 1


async def test_get_after_a_retry_shows_the_new_task_not_the_failed_one(client, team, ctx, live_url, capsys,
                                                                      monkeypatch):
    async with pushes.failing_agent() as url:
        run_id = str(await pushes.failed_run(ctx, team.autopilot_id, team.agent_id, url))
        before = (await client.get(f"/v1/runs/{run_id}", headers=team.h("member"))).json()
        assert (before["status"], before["run_attempt"], before["attempt"]) == ("failed", 1, 2)
        retried = (await _retry(client, team, run_id)).json()
        new_task = retried["task_id"]
        assert new_task != before["task_id"]

        # At once: the new task, queued, the run's second attempt; nothing of the failed task's attempts.
        run = (await client.get(f"/v1/runs/{run_id}", headers=team.h("member"))).json()
        assert (run["status"], run["task_id"], run["run_attempt"]) == ("queued", new_task, retried["attempt"])
        assert (run["attempt"], run["last_error"], run["latest_attempt"]) == (0, None, None)
        assert (run["chain"]["task"]["id"], run["chain"]["task"]["status"]) == (new_task, "queued")
        listed = (await client.get("/v1/runs", headers=team.h("member"))).json()["items"]
        assert [(r["task_id"], r["run_attempt"]) for r in listed if r["id"] == run_id] == [(new_task, 2)]
        monkeypatch.setenv("HOOKGATE_URL", live_url)
        monkeypatch.setenv("HOOKGATE_API_KEY", team.keys["member"])
        code, out, _ = await hookgate(capsys, "runs", "get", run_id)
        lines = dict(line.split(None, 1) for line in out.splitlines())
        assert code == 0 and (lines["status"], lines["task_id"], lines["run_attempt"]) == ("queued", new_task, "2")

        # The new task fails too: what the run shows is that task's last attempt, still the run's second.
        await pushes.push_until(ctx, run_id, "failed")
    run = (await client.get(f"/v1/runs/{run_id}", headers=team.h("owner"))).json()
    assert (run["status"], run["task_id"], run["run_attempt"], run["attempt"]) == ("failed", new_task, 2, 2)
    assert run["latest_attempt"]["task_id"] == new_task
    code, out, _ = await hookgate(capsys, "runs", "get", run_id)
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["latest_attempt"].startswith("task 2, #2 failed, HTTP 502")
