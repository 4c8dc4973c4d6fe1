"""Each role against each action: owner, admin, collaborator, plain member, another workspace's owner.

Every test runs the action as each role in turn and compares the whole matrix of status codes, so a
failure shows at once who was let in or kept out wrongly.
"""

from __future__ import annotations

ROLES = ("owner", "admin", "collaborator", "member", "outsider")
WRITERS = {"owner": 200, "admin": 200, "collaborator": 200, "member": 403, "outsider": 404}
WRITERS_CREATE = {**WRITERS, "owner": 201, "admin": 201, "collaborator": 201}


async def _webhook(client, team):
    made = await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                             json={"kind": "webhook", "provider": "github"})
    assert made.status_code == 201
    return made.json()


async def matrix(action):
    return {role: (await action(role)).status_code for role in ROLES}


async def test_reading_an_autopilot_is_for_every_member_and_404_for_another_workspace(client, team):
    codes = await matrix(lambda r: client.get(f"/v1/autopilots/{team.autopilot_id}", headers=team.h(r)))
    assert codes == {"owner": 200, "admin": 200, "collaborator": 200, "member": 200, "outsider": 404}
    answer = await client.get(f"/v1/autopilots/{team.autopilot_id}", headers=team.h("outsider"))
    assert answer.json() == {"error": "not_found", "message": "no such autopilot"}


async def test_editing_an_autopilot_is_for_writers_only(client, team):
    codes = await matrix(lambda r: client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=team.h(r),
                                                json={"instructions": f"edited by {r}"}))
    assert codes == WRITERS
    refused = await client.patch(f"/v1/autopilots/{team.autopilot_id}", headers=team.h("member"),
                                 json={"title": "x"})
    assert refused.json()["error"] == "forbidden"


async def test_lifecycle_verbs_are_for_writers_only(client, team):
    for verb in ("pause", "resume", "archive"):
        codes = await matrix(lambda r, v=verb: client.post(f"/v1/autopilots/{team.autopilot_id}/{v}",
                                                           headers=team.h(r)))
        assert codes == WRITERS, verb


async def test_creating_a_trigger_is_for_writers_only(client, team):
    codes = await matrix(lambda r: client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h(r),
                                               json={"kind": "webhook"}))
    assert codes == WRITERS_CREATE


async def test_only_writers_see_a_triggers_token_and_url(client, team):
    trigger = await _webhook(client, team)
    for role in ROLES:
        one = await client.get(f"/v1/triggers/{trigger['id']}", headers=team.h(role))
        listed = await client.get(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h(role))
        if role == "outsider":
            assert one.status_code == listed.status_code == 404
            continue
        assert one.status_code == listed.status_code == 200
        for seen in (one.json(), listed.json()["items"][0]):
            if WRITERS[role] == 200:
                assert seen["token"] == trigger["token"] and seen["url"] == trigger["url"], role
            else:
                assert "token" not in seen and "url" not in seen, role
                assert seen["token_hint"] == trigger["token"][-4:]


async def test_rotating_a_token_and_setting_a_secret_are_for_writers_only(client, team):
    trigger = await _webhook(client, team)
    base = f"/v1/triggers/{trigger['id']}"
    assert await matrix(lambda r: client.post(f"{base}/rotate-token", headers=team.h(r))) == WRITERS
    assert await matrix(lambda r: client.put(f"{base}/signing-secret", headers=team.h(r),
                                             json={"secret": "s3cret-value-1234"})) == WRITERS
    assert await matrix(lambda r: client.delete(f"{base}/signing-secret", headers=team.h(r))) == WRITERS


async def test_editing_and_deleting_a_trigger_are_for_writers_only(client, team):
    async def edit_then_delete(role):
        trigger = await _webhook(client, team)
        edited = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h(role), json={"enabled": False})
        deleted = await client.delete(f"/v1/triggers/{trigger['id']}", headers=team.h(role))
        assert edited.status_code == deleted.status_code
        return deleted

    assert await matrix(edit_then_delete) == WRITERS


async def test_starting_a_run_is_for_writers_only(client, team):
    codes = await matrix(lambda r: client.post(f"/v1/autopilots/{team.autopilot_id}/runs", headers=team.h(r),
                                               json={}))
    assert codes == WRITERS_CREATE


async def test_managing_collaborators_is_for_creator_owner_and_admin(client, team):
    target = str(team.ids["member"])
    added = await matrix(lambda r: client.post(f"/v1/autopilots/{team.autopilot_id}/collaborators",
                                               headers=team.h(r), json={"member_id": target}))
    assert added == {"owner": 201, "admin": 201, "collaborator": 403, "member": 403, "outsider": 404}

    async def remove(role):
        await client.post(f"/v1/autopilots/{team.autopilot_id}/collaborators", headers=team.h("owner"),
                          json={"member_id": target})
        return await client.delete(f"/v1/autopilots/{team.autopilot_id}/collaborators/{target}", headers=team.h(role))

    removed = await matrix(remove)
    assert removed == {"owner": 200, "admin": 200, "collaborator": 403, "member": 403, "outsider": 404}


async def test_a_member_who_created_an_autopilot_manages_its_collaborators(client, team):
    made = await client.post("/v1/autopilots", headers=team.h("member"), json={
        "title": "mine", "assignee": {"type": "agent", "id": team.agent_id}, "execution_mode": "run_only"})
    assert made.status_code == 201
    added = await client.post(f"/v1/autopilots/{made.json()['id']}/collaborators", headers=team.h("member"),
                              json={"member_id": str(team.ids["collaborator"])})
    assert added.status_code == 201
    assert added.json()["added_by"] == str(team.ids["member"])


async def test_only_owners_and_admins_add_members_and_read_the_audit_log(client, team):
    created = await matrix(lambda r: client.post("/v1/members", headers=team.h(r), json={"name": f"new-{r}"}))
    audit = await matrix(lambda r: client.get("/v1/audit", headers=team.h(r)))
    # The outsider owns their own workspace: they add members there, never here.
    assert created == {"owner": 201, "admin": 201, "collaborator": 403, "member": 403, "outsider": 201}
    assert audit == {"owner": 200, "admin": 200, "collaborator": 403, "member": 403, "outsider": 200}
    theirs = await client.get("/v1/members", headers=team.h("outsider"))
    assert [m["name"] for m in theirs.json()["items"]] == ["owner", "new-outsider"]


async def test_an_admin_cannot_add_an_owner_but_an_owner_can(client, team):
    by_admin = await client.post("/v1/members", headers=team.h("admin"), json={"name": "o2", "role": "owner"})
    by_owner = await client.post("/v1/members", headers=team.h("owner"), json={"name": "o2", "role": "owner"})
    assert (by_admin.status_code, by_owner.status_code) == (403, 201)


async def test_another_workspaces_ids_are_404_never_403(client, team):
    trigger = await _webhook(client, team)
    paths = [
        ("GET", f"/v1/autopilots/{team.autopilot_id}"), ("GET", f"/v1/autopilots/{team.autopilot_id}/versions"),
        ("GET", f"/v1/autopilots/{team.autopilot_id}/triggers"), ("GET", f"/v1/agents/{team.agent_id}"),
        ("GET", f"/v1/members/{team.ids['owner']}"), ("GET", f"/v1/triggers/{trigger['id']}"),
        ("GET", f"/v1/triggers/{trigger['id']}/preview"), ("DELETE", f"/v1/triggers/{trigger['id']}"),
        ("POST", f"/v1/members/{team.ids['owner']}/keys"), ("POST", f"/v1/autopilots/{team.autopilot_id}/runs"),
    ]
    for method, path in paths:
        answer = await client.request(method, path, headers=team.h("outsider"))
        assert answer.status_code == 404 and answer.json()["error"] == "not_found", (method, path)
    lists = await client.get("/v1/runs", headers=team.h("outsider"), params={"autopilot_id": team.autopilot_id})
    assert lists.json()["items"] == []
