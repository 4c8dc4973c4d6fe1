"""Issues (list, read, status changes by writers) and tasks (list, read, never the lease token)."""

from __future__ import annotations

import uuid

from autopilot import tasks
from tests import factories


async def _issue(conn, team, status="todo"):
    return str(await conn.fetchval(
        "INSERT INTO issue (workspace_id, autopilot_id, title, status) VALUES ($1, $2, 'fix it', $3) RETURNING id",
        team.world.workspace_id, team.autopilot_id, status))


async def test_issue_status_changes_are_for_writers_and_validated(client, team, conn):
    issue = await _issue(conn, team)
    codes = {r: (await client.patch(f"/v1/issues/{issue}", headers=team.h(r), json={"status": "in_progress"}))
             .status_code for r in ("owner", "collaborator", "member", "outsider")}
    assert codes == {"owner": 200, "collaborator": 200, "member": 403, "outsider": 404}
    done = await client.patch(f"/v1/issues/{issue}", headers=team.h("collaborator"), json={"status": "done"})
    assert done.json()["status"] == "done"
    bad = await client.patch(f"/v1/issues/{issue}", headers=team.h("owner"), json={"status": "closed"})
    assert bad.status_code == 422
    listed = (await client.get("/v1/issues", headers=team.h("member"), params={"status": "done"})).json()
    assert [i["id"] for i in listed["items"]] == [issue]
    assert (await client.get(f"/v1/issues/{issue}", headers=team.h("member"))).json()["title"] == "fix it"


async def test_tasks_are_listed_by_agent_and_status_without_lease_tokens(client, team, conn):
    lease = uuid.uuid4()
    task = await conn.fetchval(
        "INSERT INTO agent_task (workspace_id, agent_id, status, lease_token, lease_expires_at, idempotency_key)"
        " VALUES ($1, $2, 'running', $3, now() + interval '1 hour', 't:1') RETURNING id",
        team.world.workspace_id, team.agent_id, lease)
    listed = await client.get("/v1/tasks", headers=team.h("member"),
                              params={"agent_id": team.agent_id, "status": "running"})
    assert [t["id"] for t in listed.json()["items"]] == [str(task)]
    one = await client.get(f"/v1/tasks/{task}", headers=team.h("member"))
    assert one.json()["status"] == "running" and str(lease) not in one.text and str(lease) not in listed.text
    assert (await client.get(f"/v1/tasks/{task}", headers=team.h("outsider"))).status_code == 404
    none = await client.get("/v1/tasks", headers=team.h("member"), params={"status": "queued"})
    assert none.json() == {"items": [], "next_cursor": None}


ANSWER = {"answer": "the agent's private reply"}


async def _answered_tasks(conn, team) -> tuple[str, str]:
    """A task of the team's autopilot its agent reported with ANSWER, and a task of no autopilot with ANSWER."""
    run_id = await factories.dispatched_run(conn, uuid.UUID(team.autopilot_id))
    [won] = await tasks.claim(conn, agent_id=uuid.UUID(team.agent_id), lease_s=600, holder="w", actor_type="worker")
    assert won.run_id == run_id
    await tasks.report(conn, won.id, won.lease_token, tasks.Report("succeeded", ANSWER), actor_type="agent",
                       actor_id=team.agent_id)
    loose = await conn.fetchval(
        "INSERT INTO agent_task (workspace_id, agent_id, status, result, idempotency_key)"
        " VALUES ($1, $2, 'succeeded', $3, 't:loose') RETURNING id",
        team.world.workspace_id, uuid.UUID(team.agent_id), ANSWER)
    return str(won.id), str(loose)


async def _results(client, team, role) -> dict[str, object]:
    """The ``result`` each task shows ``role``, by task id, from the list and from each task's own answer."""
    listed = await client.get("/v1/tasks", headers=team.h(role))
    assert listed.status_code == 200, listed.text
    shown = {t["id"]: t["result"] for t in listed.json()["items"]}
    for task_id, result in shown.items():
        one = await client.get(f"/v1/tasks/{task_id}", headers=team.h(role))
        assert one.status_code == 200 and one.json()["result"] == result, (role, one.text)
        assert one.json()["status"] == "succeeded"
    return shown


async def test_a_tasks_result_is_shown_only_to_those_who_may_read_the_agents_answers(client, team, conn):
    ruled, loose = await _answered_tasks(conn, team)
    # Owners and admins read every answer; the autopilot's collaborator its tasks' only; a plain member none.
    assert await _results(client, team, "owner") == {ruled: ANSWER, loose: ANSWER}
    assert await _results(client, team, "admin") == {ruled: ANSWER, loose: ANSWER}
    assert await _results(client, team, "collaborator") == {ruled: ANSWER, loose: None}
    assert await _results(client, team, "member") == {ruled: None, loose: None}
    # Another workspace sees neither task; an anonymous caller nothing at all.
    assert (await client.get("/v1/tasks", headers=team.h("outsider"))).json()["items"] == []
    for task_id in (ruled, loose):
        assert (await client.get(f"/v1/tasks/{task_id}", headers=team.h("outsider"))).status_code == 404
        assert (await client.get(f"/v1/tasks/{task_id}")).status_code == 401
    assert (await client.get("/v1/tasks")).status_code == 401
