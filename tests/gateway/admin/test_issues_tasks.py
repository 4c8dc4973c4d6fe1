"""Issues (list, read, status changes by writers) and tasks (list, read, never the lease token)."""

from __future__ import annotations

import uuid


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
