"""Members and API keys: me, creation with a key shown once, revocation, 401s, audit entries."""

from __future__ import annotations

from tests.gateway.admin.conftest import bearer


async def test_me_names_the_member_workspace_and_key(client, team):
    me = (await client.get("/v1/me", headers=team.h("collaborator"))).json()
    assert me["member_id"] == str(team.ids["collaborator"]) and me["role"] == "member"
    assert me["workspace_id"] == str(team.world.workspace_id)


async def test_missing_malformed_and_unknown_keys_are_401_json(client, team):
    for headers in ({}, {"Authorization": "Basic abc"}, bearer("hgk_short"), bearer("hgk_" + "A" * 43)):
        answer = await client.get("/v1/me", headers=headers)
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
        assert answer.headers["www-authenticate"].startswith("Bearer")


async def test_a_new_member_gets_a_key_once_that_works(client, team, conn):
    made = await client.post("/v1/members", headers=team.h("admin"),
                             json={"name": "bea", "email": "bea@example.com", "role": "admin"})
    assert made.status_code == 201
    body = made.json()
    assert body["api_key"].startswith("hgk_") and body["role"] == "admin"
    assert (await client.get("/v1/me", headers=bearer(body["api_key"]))).json()["name"] == "bea"
    listed = (await client.get(f"/v1/members/{body['id']}", headers=team.h("member"))).json()
    assert "api_key" not in listed and listed["email"] == "bea@example.com"
    assert await conn.fetchval("SELECT count(*) FROM api_key WHERE hint = $1", body["api_key"][-4:]) == 1


async def test_keys_are_minted_for_oneself_or_by_admins_and_revocation_is_immediate_and_audited(client, team):
    mine = await client.post(f"/v1/members/{team.ids['member']}/keys", headers=team.h("member"))
    theirs = await client.post(f"/v1/members/{team.ids['admin']}/keys", headers=team.h("member"))
    assert (mine.status_code, theirs.status_code) == (201, 403)
    key = mine.json()
    assert (await client.get("/v1/me", headers=bearer(key["api_key"]))).status_code == 200
    listed = (await client.get("/v1/keys", headers=team.h("member"))).json()["items"]
    assert {k["member_id"] for k in listed} == {str(team.ids["member"])} and len(listed) == 2
    other = await client.delete(f"/v1/keys/{key['id']}", headers=team.h("collaborator"))
    assert other.status_code == 403
    revoked = await client.delete(f"/v1/keys/{key['id']}", headers=team.h("admin"))
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert (await client.get("/v1/me", headers=bearer(key["api_key"]))).status_code == 401
    twice = await client.delete(f"/v1/keys/{key['id']}", headers=team.h("admin"))
    assert twice.status_code == 200
    audit = (await client.get("/v1/audit", headers=team.h("owner"), params={"subject_id": key["id"]})).json()
    assert [a["action"] for a in audit["items"]] == ["KEY_REVOKE", "KEY_CREATE"]
    assert [a["actor_id"] for a in audit["items"]] == [str(team.ids["admin"]), str(team.ids["member"])]
    foreign = await client.delete(f"/v1/keys/{key['id']}", headers=team.h("outsider"))
    assert foreign.status_code == 404


async def test_agents_return_their_credential_once(client, team):
    http = await client.post("/v1/agents", headers=team.h("member"), json={
        "name": "bot", "runtime": {"kind": "http", "url": "http://127.0.0.1:9/hook", "timeout_s": 5}})
    pull = await client.post("/v1/agents", headers=team.h("member"), json={
        "name": "runner", "runtime": {"kind": "pull"}, "visibility": "private", "max_concurrency": 2})
    assert http.status_code == pull.status_code == 201
    assert http.json()["signing_secret"].startswith("whsec_") and "runtime_token" not in http.json()
    assert "signing_secret" not in pull.json()
    assert pull.json()["runtime_token"].startswith("hgr_") and pull.json()["visibility"] == "private"
    got = (await client.get(f"/v1/agents/{http.json()['id']}", headers=team.h("owner"))).json()
    assert "signing_secret" not in got and got["runtime"]["secret_hint"] == http.json()["signing_secret"][-4:]
    assert got["runtime"]["url"] == "http://127.0.0.1:9/hook" and got["owner_id"] == str(team.ids["member"])
    bad = await client.post("/v1/agents", headers=team.h("member"), json={
        "name": "x", "runtime": {"kind": "http", "url": "ftp://nope"}})
    assert bad.status_code == 422
    page = (await client.get("/v1/agents", headers=team.h("member"), params={"limit": 1})).json()
    rest = (await client.get("/v1/agents", headers=team.h("member"), params={"cursor": page["next_cursor"]})).json()
    assert len(page["items"]) == 1 and len(rest["items"]) == 2 and rest["next_cursor"] is None


async def test_archiving_an_agent_is_for_its_owner_or_admins_and_skips_its_runs(client, team):
    refused = await client.post(f"/v1/agents/{team.agent_id}/archive", headers=team.h("collaborator"))
    archived = await client.post(f"/v1/agents/{team.agent_id}/archive", headers=team.h("admin"))
    assert (refused.status_code, archived.status_code) == (403, 200) and archived.json()["archived_at"]
    again = await client.post(f"/v1/agents/{team.agent_id}/archive", headers=team.h("owner"))
    assert again.json()["archived_at"] == archived.json()["archived_at"]
    run = (await client.post(f"/v1/autopilots/{team.autopilot_id}/runs", headers=team.h("owner"), json={})).json()
    assert (run["status"], run["reason_code"]) == ("skipped", "agent_archived")


async def test_a_member_change_with_an_explicit_null_is_422_and_changes_nothing(client, team, conn):
    member = f"/v1/members/{team.ids['member']}"
    for body in ({"role": None}, {"disabled": None}, {"role": None, "disabled": False}):
        answer = await client.patch(member, headers=team.h("owner"), json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"] == "invalid_request" and next(iter(body)) in answer.json()["message"]
    shown = (await client.get(member, headers=team.h("owner"))).json()
    assert shown["role"] == "member" and shown["disabled_at"] is None
    assert await conn.fetchval("SELECT count(*) FROM audit_log WHERE action LIKE 'MEMBER_%'") == 0
    # Who may not change members is refused as before (401, 403, another workspace's 404), whatever the body.
    assert (await client.patch(member, json={"role": None})).status_code == 401
    assert (await client.patch(member, headers=team.h("collaborator"), json={"role": "admin"})).status_code == 403
    assert (await client.patch(member, headers=team.h("outsider"), json={"role": "admin"})).status_code == 404
