"""An agent's retry schedule (create, PATCH, null = the default) and its health, as the admin API shows them.

Health is driven by real pushes: the worker's ``Pusher`` against a real local agent answering 503, with the
breaker set to trip after two consecutive failures, so what the API shows is what the push path wrote.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from starlette.responses import Response

from autopilot import admission, dispatch
from hookgate.settings import Settings
from tests import factories
from tests.conftest import make_settings
from tests.gateway.admin.conftest import agent_body, create_agent
from tests.worker.conftest import FAST, AgentServer, agent_server, wait_for  # noqa: F401  (fixture)
from worker.push import Pusher, PushWorker

NEVER_FAILED = {"state": "healthy", "next_probe_at": None, "failures": 0, "last_error": None}


@pytest.fixture
def settings(db_url: str) -> Settings:
    """Fast retries, and an agent is unhealthy after two consecutive failed pushes (first probe after 5 s)."""
    return make_settings(db_url, **(FAST | {"agent_trip_after": 2, "agent_probe_min_s": 5.0}))


async def _dispatched_task(ctx, w, agent_id) -> Any:
    """One run of a new autopilot assigned to the agent, dispatched: its task row."""
    ap = await factories.autopilot(w, agent_id)
    async with ctx.pool.acquire() as conn:
        adm = await admission.admit(conn, autopilot_id=ap["id"], source="api", payload={}, heartbeat_timeout_s=120.0)
        # As the worker dispatches: the default number of attempts is the settings' schedule's.
        await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(120.0, ctx.settings.retry_schedule.attempts))
        return await conn.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", adm.run_id)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


# --- retry_schedule -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", [{"kind": "http", "url": "http://127.0.0.1:9/agent"}, {"kind": "pull"}])
async def test_an_agent_created_with_a_retry_schedule_shows_it_and_a_never_failed_health(client, world,
                                                                                          runtime):
    made = await create_agent(client, world,
                              {"name": "bot", "runtime": runtime, "retry_schedule": [1, 60, 3600.5]})
    assert made["retry_schedule"] == [1, 60, 3600.5]
    assert made["health"] == NEVER_FAILED | {"since": made["created_at"]}
    shown = (await client.get(f"/v1/agents/{made['id']}", headers=world.auth)).json()
    assert shown["retry_schedule"] == [1, 60, 3600.5]
    assert shown["health"] == NEVER_FAILED | {"since": made["created_at"]}
    plain = await create_agent(client, world, {"name": "plain", "runtime": runtime})
    assert plain["retry_schedule"] is None and plain["health"]["state"] == "healthy"
    listed = (await client.get("/v1/agents", headers=world.auth)).json()["items"]
    assert {a["id"]: a["retry_schedule"] for a in listed} == {made["id"]: [1, 60, 3600.5], plain["id"]: None}


async def test_patch_sets_the_schedule_null_resets_it_and_the_audit_names_it(client, world, conn):
    agent = await create_agent(client, world, agent_body())
    set_ = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth,
                              json={"retry_schedule": [10, 20]})
    assert set_.status_code == 200 and set_.json()["retry_schedule"] == [10, 20], set_.text
    shown = await client.get(f"/v1/agents/{agent['id']}", headers=world.auth)
    assert shown.json()["retry_schedule"] == [10, 20]
    same = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth,
                              json={"retry_schedule": [10, 20]})
    assert same.status_code == 200 and same.json()["retry_schedule"] == [10, 20]
    reset = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth, json={"retry_schedule": None})
    assert reset.status_code == 200 and reset.json()["retry_schedule"] is None, reset.text
    assert await conn.fetchval("SELECT retry_schedule FROM agent WHERE id = $1", agent["id"]) is None
    entries = await conn.fetch("SELECT detail FROM audit_log WHERE action = 'AGENT_UPDATE' AND subject_id = $1 "
                               "ORDER BY id", agent["id"])
    details = [e["detail"] if isinstance(e["detail"], dict) else json.loads(e["detail"]) for e in entries]
    assert [d["changed"] for d in details] == [["retry_schedule"], ["retry_schedule"]]  # the no-op is not audited
    assert [d["to"]["retry_schedule"] for d in details] == [[10, 20], None]


@pytest.mark.parametrize("schedule", [[], [1] * 21, [0], [-5], [7 * 86400 + 1], ["soon"], "5s,1m",
                                      [[1]], [None]])
async def test_a_bad_retry_schedule_is_422_on_create_and_patch(client, world, conn, schedule):
    refused = await client.post("/v1/agents", headers=world.auth, json=agent_body(retry_schedule=schedule))
    assert refused.status_code == 422 and refused.json()["error"] == "invalid_request", refused.text
    agent = await create_agent(client, world, agent_body(retry_schedule=[5]))
    patched = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth,
                                 json={"retry_schedule": schedule})
    assert patched.status_code == 422 and patched.json()["error"] == "invalid_request", patched.text
    assert await conn.fetchval("SELECT count(*) FROM agent") == 1
    assert await conn.fetchval("SELECT retry_schedule FROM agent WHERE id = $1", agent["id"]) == [5]


async def test_the_longest_allowed_schedule_is_accepted(client, world):
    made = await create_agent(client, world, agent_body(retry_schedule=[7 * 86400] * 20))
    assert made["retry_schedule"] == [7 * 86400] * 20


async def test_only_the_agents_owner_or_an_admin_changes_its_schedule(client, team):
    r = {role: await client.patch(f"/v1/agents/{team.agent_id}", headers=team.h(role), json={"retry_schedule": [9]})
         for role in ("member", "outsider", "admin")}
    assert (r["member"].status_code, r["member"].json()["error"]) == (403, "forbidden")
    assert r["outsider"].status_code == 404 and r["outsider"].json()["error"] == "not_found"
    assert r["admin"].status_code == 200 and r["admin"].json()["retry_schedule"] == [9]
    anonymous = await client.patch(f"/v1/agents/{team.agent_id}", json={"retry_schedule": [9]})
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthorized"


@pytest.mark.parametrize("kind", ["http", "pull"])
async def test_tasks_made_after_a_schedule_change_get_its_attempts(client, ctx, kind, world):
    runtime = {"kind": "pull"} if kind == "pull" else {"kind": "http", "url": "http://127.0.0.1:9/agent"}
    agent = await create_agent(client, world, {"name": "bot", "runtime": runtime})
    default_attempts = ctx.settings.retry_schedule.attempts
    if kind == "pull":  # a pull agent's runs are dispatched while one of its runtimes is online
        beat = await client.post("/v1/runtime/heartbeat", headers={"Authorization": f"Bearer {agent['runtime_token']}"})
        assert beat.status_code == 200
    assert (await _dispatched_task(ctx, world, agent["id"]))["max_attempts"] == default_attempts
    await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth, json={"retry_schedule": [1, 2, 3]})
    assert (await _dispatched_task(ctx, world, agent["id"]))["max_attempts"] == 4
    await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth, json={"retry_schedule": None})
    assert (await _dispatched_task(ctx, world, agent["id"]))["max_attempts"] == default_attempts


# --- health, from real failing pushes -------------------------------------------------------------------------


async def _always_503(_n, _hit):
    return Response(status_code=503, content=b"down for maintenance")


async def _push_until(ctx, pusher, predicate) -> None:
    pushes = PushWorker(ctx, holder="t1", pusher=pusher)

    async def done() -> bool:
        await pushes.run_once()
        return bool(await predicate())

    await wait_for(done)


async def test_an_agent_whose_pushes_keep_failing_is_shown_unhealthy_with_its_next_probe(
        client, ctx, conn, agent_server: AgentServer):  # noqa: F811
    agent_server.behaviours["sick"] = _always_503
    w = await factories.world(ctx)
    agent = await create_agent(client, w, agent_body(agent_server.url("sick")))
    fine = await create_agent(client, w, agent_body(agent_server.url("fine"), name="fine"))
    task = await _dispatched_task(ctx, w, agent["id"])
    pusher = Pusher(ctx, holder="t1")
    try:
        await _push_until(ctx, pusher, lambda: conn.fetchval(
            "SELECT state = 'unhealthy' FROM agent_health WHERE agent_id = $1", agent["id"]))
    finally:
        await pusher.stop(deadline=5)
    assert len(agent_server.of("sick")) == 2
    shown = await client.get(f"/v1/agents/{agent['id']}", headers=w.auth)
    health = shown.json()["health"]
    assert (health["state"], health["failures"], health["last_error"]) == ("unhealthy", 2, "agent answered 503")
    since, probe = _at(health["since"]), _at(health["next_probe_at"])
    assert since >= _at(agent["created_at"])
    assert timedelta(seconds=4.9) <= probe - since <= timedelta(seconds=5.5)
    listed = {a["id"]: a["health"] for a in (await client.get("/v1/agents", headers=w.auth)).json()["items"]}
    assert listed[agent["id"]] == health
    assert listed[fine["id"]] == NEVER_FAILED | {"since": fine["created_at"]}
    # The task waits for the agent without spending its attempts.
    row = await conn.fetchrow("SELECT status, attempt FROM agent_task WHERE id = $1", task["id"])
    assert (row["status"], row["attempt"]) == ("queued", 1)
    # Archiving answers with the agent as it is, its health included.
    archived = await client.post(f"/v1/agents/{agent['id']}/archive", headers=w.auth)
    assert archived.status_code == 200 and archived.json()["health"] == health


async def test_an_agent_below_the_trip_count_stays_healthy_and_counts_its_failure(
        client, ctx, conn, agent_server: AgentServer):  # noqa: F811
    async def once_503(n, _hit):
        return Response(status_code=503) if n == 0 else Response(status_code=200)

    agent_server.behaviours["flaky"] = once_503
    w = await factories.world(ctx)
    # Its own schedule waits 30 s after the first failure: the health is read while the task waits.
    agent = await create_agent(client, w, agent_body(agent_server.url("flaky"), retry_schedule=[30]))
    task = await _dispatched_task(ctx, w, agent["id"])
    assert task["max_attempts"] == 2
    pusher = Pusher(ctx, holder="t1")
    try:
        await _push_until(ctx, pusher, lambda: conn.fetchval(
            "SELECT status = 'queued' AND attempt = 1 FROM agent_task WHERE id = $1", task["id"]))
        health = (await client.get(f"/v1/agents/{agent['id']}", headers=w.auth)).json()["health"]
        # One failure: still healthy (since it was made), the failure counted with its error.
        assert health == {"state": "healthy", "since": agent["created_at"], "next_probe_at": None, "failures": 1,
                          "last_error": "agent answered 503"}
        await conn.execute("UPDATE agent_task SET available_at = now() WHERE id = $1", task["id"])
        await _push_until(ctx, pusher, lambda: conn.fetchval(
            "SELECT status = 'succeeded' FROM agent_task WHERE id = $1", task["id"]))
    finally:
        await pusher.stop(deadline=5)
    health = (await client.get(f"/v1/agents/{agent['id']}", headers=w.auth)).json()["health"]
    assert (health["state"], health["since"], health["failures"], health["next_probe_at"]) == (
        "healthy", agent["created_at"], 0, None)


async def test_a_task_due_while_its_agent_is_unhealthy_says_it_waits_for_the_next_probe(
        client, ctx, conn, agent_server: AgentServer):  # noqa: F811
    agent_server.behaviours["sick"] = _always_503
    w = await factories.world(ctx)
    agent = await create_agent(client, w, agent_body(agent_server.url("sick")))
    task = await _dispatched_task(ctx, w, agent["id"])
    pusher = Pusher(ctx, holder="t1")
    try:
        await _push_until(ctx, pusher, lambda: conn.fetchval(
            "SELECT state = 'unhealthy' FROM agent_health WHERE agent_id = $1", agent["id"]))
    finally:
        await pusher.stop(deadline=5)
    # Its own wait is over (a time in the past), but the open circuit holds it until a probe gets through.
    await conn.execute("UPDATE agent_task SET available_at = now() - interval '1 minute' WHERE id = $1", task["id"])
    probe = _at((await client.get(f"/v1/agents/{agent['id']}", headers=w.auth)).json()["health"]["next_probe_at"])
    shown_task = (await client.get(f"/v1/tasks/{task['id']}", headers=w.auth)).json()
    listed = (await client.get("/v1/tasks", headers=w.auth, params={"agent_id": agent["id"]})).json()["items"]
    run = (await client.get(f"/v1/runs/{task['run_id']}", headers=w.auth)).json()
    runs = (await client.get("/v1/runs", headers=w.auth)).json()["items"]
    expected = f"waiting for the agent to recover (next probe {probe.isoformat().replace('+00:00', 'Z')})"
    for shown in (shown_task, listed[0], run, runs[0]):
        assert shown["status"] == "queued"
        assert _at(shown["next_attempt_at"]) == probe and shown["waiting"] == expected
    # A probe that is due (no worker has taken it yet) is not a time in the past either: it is now.
    await conn.execute("UPDATE agent_health SET next_probe_at = now() - interval '5 minutes' WHERE agent_id = $1",
                       agent["id"])
    now = await conn.fetchval("SELECT now()")
    shown_task = (await client.get(f"/v1/tasks/{task['id']}", headers=w.auth)).json()
    assert _at(shown_task["next_attempt_at"]) >= now and "(next probe " in shown_task["waiting"]
    # Healthy again: the task's own time, no waiting.
    await conn.execute("UPDATE agent_health SET state = 'healthy', next_probe_at = NULL WHERE agent_id = $1",
                       agent["id"])
    shown_task = (await client.get(f"/v1/tasks/{task['id']}", headers=w.auth)).json()
    run = (await client.get(f"/v1/runs/{task['run_id']}", headers=w.auth)).json()
    assert shown_task["waiting"] is None and run["waiting"] is None
    assert _at(shown_task["next_attempt_at"]) < now and _at(run["next_attempt_at"]) < now
