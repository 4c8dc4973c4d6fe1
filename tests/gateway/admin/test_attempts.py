"""A task's attempts (``GET /v1/tasks/{id}/attempts``) and what runs and tasks show of them.

The attempts are made by real pushes (the worker's ``Pusher``) to a real local agent that answers 500 (with a
body, a ``Retry-After`` and headers, a cookie among them that must not be kept), then 200. Who sees the
agent's answer: writers of the task's autopilot; everyone else in the workspace sees the rest.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from starlette.responses import JSONResponse, Response

from autopilot import dispatch
from hookgate.settings import Settings
from tests.conftest import make_settings
from tests.gateway.admin.conftest import Team
from tests.worker.conftest import FAST, AgentServer, agent_server, wait_for  # noqa: F401  (fixture)
from worker.push import KEPT_HEADERS, Pusher, PushWorker

UNKNOWN = "0190e0a0-0000-7000-8000-000000000000"
ANSWER_HEADERS = {"x-request-id": "req-1", "set-cookie": "session=s3cret", "retry-after": "60"}


@pytest.fixture
def settings(db_url: str) -> Settings:
    """Fast worker settings (the agent's Retry-After, not the schedule, sets the wait here)."""
    return make_settings(db_url, **FAST)


async def _first_500_then_200(n: int, _hit: Any) -> Response:
    if n == 0:
        return Response(status_code=500, content=b"database exploded", headers=ANSWER_HEADERS,
                        media_type="text/plain")
    return JSONResponse({"ok": True})


async def _pushed_once(client, team: Team, conn, server: AgentServer) -> tuple[str, str]:
    """A run of the team's autopilot whose first push got a 500 asking for 60 s: ``(run id, task id)``."""
    server.behaviours["a"] = _first_500_then_200
    moved = await client.patch(f"/v1/agents/{team.agent_id}", headers=team.h("owner"),
                               json={"url": server.url("a")})
    assert moved.status_code == 200, moved.text
    made = await client.post(f"/v1/autopilots/{team.autopilot_id}/runs", headers=team.h("owner"), json={})
    run_id = made.json()["run_id"]
    s = team.ctx.settings
    await dispatch.dispatch_run(conn, run_id, dispatch.Options(s.heartbeat_timeout_s, s.retry_schedule.attempts))
    task_id = str(await conn.fetchval("SELECT task_id FROM autopilot_run WHERE id = $1", run_id))
    await _push_until(team, conn, task_id, "queued", attempt=1)
    return run_id, task_id


async def _push_until(team: Team, conn, task_id: str, status: str, attempt: int) -> None:
    pusher = Pusher(team.ctx, holder="t1")
    pushes = PushWorker(team.ctx, holder="t1", pusher=pusher)

    async def reached() -> bool:
        await pushes.run_once()
        row = await conn.fetchrow("SELECT status, attempt FROM agent_task WHERE id = $1", task_id)
        return (row["status"], row["attempt"]) == (status, attempt) and await conn.fetchval(
            "SELECT count(*) FROM task_attempt WHERE task_id = $1", task_id) == attempt

    try:
        await wait_for(reached)
    finally:
        await pusher.stop(deadline=5)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def _attempts(client, team: Team, task_id: str, role: str, **params: Any) -> dict[str, Any]:
    answer = await client.get(f"/v1/tasks/{task_id}/attempts", headers=team.h(role), params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_attempts_need_a_key_and_another_workspaces_task_is_not_found(
        client, team, conn, agent_server):  # noqa: F811
    _, task_id = await _pushed_once(client, team, conn, agent_server)
    anonymous = await client.get(f"/v1/tasks/{task_id}/attempts")
    assert (anonymous.status_code, anonymous.json()["error"]) == (401, "unauthorized")
    outsider = await client.get(f"/v1/tasks/{task_id}/attempts", headers=team.h("outsider"))
    unknown = await client.get(f"/v1/tasks/{UNKNOWN}/attempts", headers=team.h("owner"))
    assert outsider.status_code == unknown.status_code == 404
    assert outsider.json() == unknown.json() == {"error": "not_found", "message": "no such task"}
    for params in ({"limit": 0}, {"limit": 501}):
        bad = await client.get(f"/v1/tasks/{task_id}/attempts", headers=team.h("owner"), params=params)
        assert bad.status_code == 422 and bad.json()["error"] == "invalid_request", params
    cursor = await client.get(f"/v1/tasks/{task_id}/attempts", headers=team.h("owner"), params={"cursor": "!!"})
    assert (cursor.status_code, cursor.json()["error"]) == (400, "invalid_cursor")
    not_uuid = await client.get("/v1/tasks/nope/attempts", headers=team.h("owner"))
    assert not_uuid.status_code in (404, 422) and "error" in not_uuid.json()


async def test_a_pushed_task_lists_its_attempts_oldest_first_the_answer_for_writers_only(
        client, team, conn, agent_server):  # noqa: F811
    run_id, task_id = await _pushed_once(client, team, conn, agent_server)
    await conn.execute("UPDATE agent_task SET available_at = now() WHERE id = $1", task_id)
    await _push_until(team, conn, task_id, "succeeded", attempt=2)
    full = await _attempts(client, team, task_id, "collaborator")
    assert full["next_cursor"] is None
    first, second = full["items"]
    assert (first["attempt"], first["outcome"], first["http_status"]) == (1, "failed", 500)
    assert first["error"] == "agent answered 500"
    assert first["response_body"] == "database exploded"
    kept = first["response_headers"]
    assert {k: kept.get(k) for k in ("x-request-id", "retry-after", "content-length")} == {
        "x-request-id": "req-1", "retry-after": "60", "content-length": "17"}
    assert kept["content-type"].startswith("text/plain") and set(kept) <= set(KEPT_HEADERS)
    assert (second["attempt"], second["outcome"], second["http_status"], second["error"]) == (2, "succeeded", 200,
                                                                                           None)
    assert second["response_body"] == '{"ok":true}'
    for item in full["items"]:
        assert (item["task_id"], item["run_id"], item["agent_id"]) == (task_id, run_id, team.agent_id)
        assert item["duration_ms"] >= 0 and _at(item["finished_at"]) >= _at(item["started_at"])
    assert _at(second["started_at"]) >= _at(first["finished_at"])
    # Writers (the creator, the collaborator, owners and admins) see the answer; a plain member does not.
    for role in ("owner", "admin"):
        assert (await _attempts(client, team, task_id, role)) == full
    plain = await _attempts(client, team, task_id, "member")
    assert plain["items"] == [i | {"response_headers": None, "response_body": None} for i in full["items"]]
    assert "s3cret" not in str(full) and "database exploded" not in str(plain)
    stored = await conn.fetchval("SELECT response_headers::text FROM task_attempt WHERE http_status = 500")
    assert "cookie" not in stored
    # Cursor paging, oldest first.
    page1 = await _attempts(client, team, task_id, "member", limit=1)
    assert [i["id"] for i in page1["items"]] == [first["id"]] and page1["next_cursor"]
    page2 = await _attempts(client, team, task_id, "member", limit=1, cursor=page1["next_cursor"])
    assert [i["id"] for i in page2["items"]] == [second["id"]] and page2["next_cursor"] is None
    # The run shows the latest attempt (the answer again for writers only), its attempt count and no error.
    run = (await client.get(f"/v1/runs/{run_id}", headers=team.h("collaborator"))).json()
    assert (run["status"], run["attempt"], run["last_error"], run["next_attempt_at"]) == ("completed", 2, None, None)
    assert run["latest_attempt"] == second
    seen = (await client.get(f"/v1/runs/{run_id}", headers=team.h("member"))).json()
    assert seen["latest_attempt"] == second | {"response_headers": None, "response_body": None}


async def test_a_run_waiting_for_its_retry_is_queued_with_next_attempt_at_and_last_error(
        client, team, conn, agent_server):  # noqa: F811
    run_id, task_id = await _pushed_once(client, team, conn, agent_server)
    available = await conn.fetchval("SELECT available_at FROM agent_task WHERE id = $1", task_id)
    left = available - await conn.fetchval("SELECT now()")
    assert timedelta(seconds=55) < left <= timedelta(seconds=60)  # the agent's Retry-After
    for role in ("member", "collaborator"):
        run = (await client.get(f"/v1/runs/{run_id}", headers=team.h(role))).json()
        assert (run["status"], run["attempt"], run["last_error"]) == ("queued", 1, "agent answered 500")
        assert _at(run["next_attempt_at"]) == available
        latest = run["latest_attempt"]
        assert (latest["outcome"], latest["http_status"], latest["attempt"]) == ("failed", 500, 1)
        assert (latest["response_body"] is None) == (role == "member")
    listed = (await client.get("/v1/runs", headers=team.h("member"), params={"status": "queued"})).json()["items"]
    assert [(r["id"], r["attempt"], r["last_error"]) for r in listed] == [(run_id, 1, "agent answered 500")]
    assert _at(listed[0]["next_attempt_at"]) == available and "latest_attempt" not in listed[0]
    task = (await client.get(f"/v1/tasks/{task_id}", headers=team.h("member"))).json()
    assert (task["status"], task["attempt"], task["last_error"]) == ("queued", 1, "agent answered 500")
    assert _at(task["next_attempt_at"]) == available
    tasks = (await client.get("/v1/tasks", headers=team.h("member"), params={"run_id": run_id})).json()["items"]
    assert [(t["id"], t["last_error"]) for t in tasks] == [(task_id, "agent answered 500")]
    assert _at(tasks[0]["next_attempt_at"]) == available


async def test_a_run_without_a_task_yet_shows_no_attempt(client, team):
    made = await client.post(f"/v1/autopilots/{team.autopilot_id}/runs", headers=team.h("owner"), json={})
    run = (await client.get(f"/v1/runs/{made.json()['run_id']}", headers=team.h("owner"))).json()
    assert (run["attempt"], run["last_error"], run["next_attempt_at"], run["latest_attempt"]) == (0, None, None, None)
