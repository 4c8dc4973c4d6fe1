"""Autopilots: create/read/edit, lifecycle verbs, rule versions in the same transaction, attribution."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from autopilot import admission


async def _versions(client, team, role="owner"):
    answer = await client.get(f"/v1/autopilots/{team.autopilot_id}/versions", headers=team.h(role))
    return answer.json()["items"]


async def test_create_answers_201_active_version_1_and_validates_the_assignee(client, team):
    made = await client.post("/v1/autopilots", headers=team.h("member"), json={
        "title": "triage", "instructions": "label it", "assignee": {"type": "agent", "id": team.agent_id},
        "execution_mode": "run_only"})
    assert made.status_code == 201
    body = made.json()
    assert (body["status"], body["version"], body["created_by"]) == ("active", 1, str(team.ids["member"]))
    missing = await client.post("/v1/autopilots", headers=team.h("owner"), json={
        "title": "x", "assignee": {"type": "agent", "id": team.other.owner_id.__str__()}})
    assert missing.status_code == 422 and missing.json()["error"] == "invalid_assignee"
    listed = await client.get("/v1/autopilots", headers=team.h("owner"), params={"status": "active"})
    assert {a["id"] for a in listed.json()["items"]} == {team.autopilot_id, body["id"]}


async def test_every_substantive_change_appends_a_version_with_its_publisher(client, team):
    h = team.h("collaborator")
    await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=h, json={"instructions": "new"})
    await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=h, json={"instructions": "new"})  # no-op
    await client.post(f"/v1/autopilots/{team.autopilot_id}/pause", headers=h)
    await client.post(f"/v1/autopilots/{team.autopilot_id}/pause", headers=h)  # already paused: no version
    await client.post(f"/v1/autopilots/{team.autopilot_id}/resume", headers=team.h("admin"))
    trigger = (await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=h,
                                 json={"kind": "webhook"})).json()
    await client.patch(f"/v1/triggers/{trigger['id']}", headers=h, json={"event_filters": ["github.push"]})
    await client.delete(f"/v1/triggers/{trigger['id']}", headers=h)
    await client.post(f"/v1/autopilots/{team.autopilot_id}/archive", headers=h)
    versions = await _versions(client, team)
    assert [(v["version"], v["change"]) for v in versions] == [
        (1, "create"), (2, "edit"), (3, "pause"), (4, "resume"), (5, "trigger_create"), (6, "trigger_edit"),
        (7, "trigger_delete"), (8, "archive")]
    collaborator, admin = str(team.ids["collaborator"]), str(team.ids["admin"])
    assert [v["publisher_id"] for v in versions[1:]] == [collaborator, collaborator, admin] + [collaborator] * 4
    assert versions[1]["config"]["instructions"] == "new" and versions[1]["config"]["fields"] == ["instructions"]
    assert versions[2]["config"]["status"] == "paused"
    got = (await client.get(f"/v1/autopilots/{team.autopilot_id}", headers=h)).json()
    assert (got["status"], got["version"]) == ("archived", 8)


async def test_archived_is_final(client, team):
    await client.post(f"/v1/autopilots/{team.autopilot_id}/archive", headers=team.h("owner"))
    resumed = await client.post(f"/v1/autopilots/{team.autopilot_id}/resume", headers=team.h("owner"))
    edited = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=team.h("owner"), json={"title": "t"})
    trigger = await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                                json={"kind": "webhook"})
    assert [a.status_code for a in (resumed, edited, trigger)] == [409, 409, 409]
    assert resumed.json()["error"] == "archived"


async def test_a_failed_change_leaves_no_version_behind(client, team, conn):
    # The version and the change share one transaction: a refused edit adds neither.
    await conn.execute("ALTER TABLE autopilot ADD CONSTRAINT no_bad_title CHECK (title <> 'bad')")
    answer = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=team.h("owner"),
                                json={"title": "bad"})
    assert answer.status_code == 422
    assert [v["change"] for v in await _versions(client, team)] == ["create"]


async def test_a_collaborator_who_edits_becomes_accountable_for_later_schedule_runs(client, team, conn):
    schedule = (await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                                  json={"kind": "schedule", "cron": "*/5 * * * *"})).json()
    before = await admission.decide(conn, autopilot_id=team.autopilot_id, trigger_id=schedule["id"],
                                    source="schedule", heartbeat_timeout_s=120.0)
    assert before.accountable_id == team.ids["owner"]

    edited = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=team.h("collaborator"),
                                json={"instructions": "collaborator's rule"})
    assert edited.status_code == 200
    trigger = (await client.get(f"/v1/triggers/{schedule['id']}", headers=team.h("owner"))).json()
    assert trigger["published_by_id"] == str(team.ids["collaborator"])
    after = await admission.decide(conn, autopilot_id=team.autopilot_id, trigger_id=schedule["id"],
                                   source="schedule", heartbeat_timeout_s=120.0)
    assert after.accountable_id == team.ids["collaborator"] and after.reason_code is None
    planned = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=5)
    run = await admission.admit(conn, autopilot_id=team.autopilot_id, trigger_id=schedule["id"], source="schedule",
                                payload={}, planned_at=planned, heartbeat_timeout_s=120.0)
    got = (await client.get(f"/v1/runs/{run.run_id}", headers=team.h("owner"))).json()
    assert got["accountable_id"] == str(team.ids["collaborator"]) and got["originator_id"] is None
    assert got["rule_version_id"] == after.rule_version_id.__str__()


async def test_a_trigger_edit_restamps_only_that_trigger(client, team):
    made = [(await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                               json={"kind": "webhook"})).json() for _ in range(2)]
    await client.patch(f"/v1/triggers/{made[0]['id']}", headers=team.h("admin"), json={"rate_limit_per_minute": 5})
    seen = [(await client.get(f"/v1/triggers/{t['id']}", headers=team.h("owner"))).json() for t in made]
    assert [t["published_by_id"] for t in seen] == [str(team.ids["admin"]), str(team.ids["owner"])]
    assert seen[0]["rate_limit_per_minute"] == 5


async def test_patch_validates_fields_and_refuses_unknown_ones(client, team):
    h = team.h("owner")
    unknown = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=h, json={"status": "paused"})
    null_title = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=h, json={"title": None})
    bad_mode = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=h, json={"execution_mode": "x"})
    not_json = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=h, content=b"{nope")
    assert [a.status_code for a in (unknown, null_title, bad_mode, not_json)] == [422, 422, 422, 400]
    assert unknown.json()["error"] == "invalid_request" and "status" in unknown.json()["message"]
    assert not_json.json() == {"error": "invalid_json", "message": "the request body is not valid JSON"}


async def test_switching_the_assignee_to_a_squad(client, team):
    squad = await client.post("/v1/squads", headers=team.h("owner"), json={"name": "sq", "leader_id": team.agent_id})
    assert squad.status_code == 201 and squad.json()["member_ids"] == [team.agent_id]
    edited = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=team.h("owner"),
                                json={"assignee": {"type": "squad", "id": squad.json()["id"]}})
    assert edited.json()["assignee"] == {"type": "squad", "id": squad.json()["id"]}


async def test_a_private_agent_is_assigned_only_by_its_owner(client, team):
    private = (await client.post("/v1/agents", headers=team.h("member"), json={
        "name": "mine", "runtime": {"kind": "pull"}, "visibility": "private"})).json()
    spec = {"title": "t", "assignee": {"type": "agent", "id": private["id"]}}
    by_admin = await client.post("/v1/autopilots", headers=team.h("admin"), json=spec)
    by_owner = await client.post("/v1/autopilots", headers=team.h("member"), json=spec)
    assert (by_admin.status_code, by_admin.json()["error"], by_owner.status_code) == (422, "invalid_assignee", 201)


async def test_run_timeout_s_is_set_at_create_changed_or_removed_by_patch_and_validated(client, team):
    base = {"title": "timed", "assignee": {"type": "agent", "id": team.agent_id}}
    made = await client.post("/v1/autopilots", headers=team.h("owner"), json=base | {"run_timeout_s": 30})
    assert made.status_code == 201 and made.json()["run_timeout_s"] == 30
    url = f"/v1/autopilots/{made.json()['id']}"
    assert (await client.get(url, headers=team.h("member"))).json()["run_timeout_s"] == 30
    changed = await client.patch(url, headers=team.h("owner"), json={"run_timeout_s": 5})
    assert (changed.json()["run_timeout_s"], changed.json()["version"]) == (5, 2)
    removed = await client.patch(url, headers=team.h("owner"), json={"run_timeout_s": None})
    assert (removed.json()["run_timeout_s"], removed.json()["version"]) == (None, 3)
    versions = (await client.get(f"{url}/versions", headers=team.h("owner"))).json()["items"]
    assert [v["config"]["run_timeout_s"] for v in versions] == [30, 5, None]
    assert (await client.get(url, headers=team.h("owner"))).json()["run_timeout_s"] is None
    plain = await client.post("/v1/autopilots", headers=team.h("owner"), json=base)
    assert plain.json()["run_timeout_s"] is None
    for bad in (0, -1, "5", True, 1.5, 10**12):
        refused = await client.post("/v1/autopilots", headers=team.h("owner"), json=base | {"run_timeout_s": bad})
        patched = await client.patch(url, headers=team.h("owner"), json={"run_timeout_s": bad})
        assert (refused.status_code, patched.status_code) == (422, 422), bad
        assert refused.json()["error"] == patched.json()["error"] == "invalid_request"
    member = await client.patch(url, headers=team.h("member"), json={"run_timeout_s": 9})
    assert member.status_code == 403
