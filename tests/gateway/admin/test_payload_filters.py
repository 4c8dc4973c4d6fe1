"""Payload filters on webhook triggers, through the API and the ingress: saved, validated, applied, tested."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

LABELLED_BUG = {"and": [{"path": "/action", "eq": "labeled"}, {"path": "/label/name", "eq": "bug"}]}


async def _create(client, team, role: str = "owner", **spec: Any):
    return await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h(role),
                             json={"kind": "webhook", **spec})


async def _post(client, token: str, body: Any, content_type: str = "application/json"):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(f"/hooks/{token}", content=raw, headers={"content-type": content_type})


async def test_a_body_the_filter_refuses_is_ignored_and_its_page_names_the_node(client, team, conn):
    made = await _create(client, team, payload_filter=LABELLED_BUG)
    assert made.status_code == 201, made.text
    trigger = made.json()
    assert trigger["payload_filter"] == LABELLED_BUG
    bug = await _post(client, trigger["token"], {"action": "labeled", "label": {"name": "bug"}})
    docs = await _post(client, trigger["token"], {"action": "labeled", "label": {"name": "docs"}})
    assert bug.json()["status"] == "accepted", bug.text
    assert docs.status_code == 200
    assert docs.json() == {"status": "ignored", "delivery_id": docs.json()["delivery_id"], "reason": "payload_filter"}
    assert "docs" not in docs.text and "/and/1" not in docs.text  # the sender learns the code only
    page = await client.get(f"/v1/deliveries/{docs.json()['delivery_id']}", headers=team.h("owner"))
    assert (page.json()["status"], page.json()["reason_code"]) == ("ignored", "payload_filter")
    assert page.json()["reason"] == ('the payload filter does not match: /label/name is "docs", not equal to "bug" '
                                     "(node /and/1)")
    assert await conn.fetchval("SELECT count(*) FROM autopilot_run WHERE trigger_id = $1", trigger["id"]) == 1


async def test_form_bodies_are_filtered_on_their_fields(client, team):
    only_mms = {"and": [{"path": "/NumMedia", "gt": 0}, {"path": "/From", "prefix": "+1"}]}
    trigger = (await _create(client, team, payload_filter=only_mms)).json()
    form = "application/x-www-form-urlencoded"
    mms = await _post(client, trigger["token"], urlencode({"From": "+15550001", "NumMedia": "2"}).encode(), form)
    sms = await _post(client, trigger["token"], urlencode({"From": "+15550001", "NumMedia": "0"}).encode(), form)
    assert [mms.json()["status"], sms.json()["status"]] == ["accepted", "ignored"]


async def test_a_bad_filter_is_refused_naming_its_position_on_create_and_edit(client, team):
    bad = {"and": [{"path": "/action", "eq": "opened"}, {"path": "/amount", "gt": "100"}]}
    created = await _create(client, team, payload_filter=bad)
    assert created.status_code == 422
    assert created.json()["error"] == "invalid_request"
    assert created.json()["message"] == "webhook.payload_filter: at /and/1/gt: \"gt\" compares with a number"
    trigger = (await _create(client, team)).json()
    for wrong, at in (({"or": []}, "/or"), ({"not": {"path": "x", "eq": 1}}, "/not/path"), ([1], "payload_filter")):
        edited = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"),
                                    json={"payload_filter": wrong})
        assert edited.status_code == 422 and at in edited.json()["message"], edited.text
    deep: dict[str, Any] = {"path": "/a", "exists": True}
    for _ in range(8):
        deep = {"not": deep}
    too_deep = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"),
                                  json={"payload_filter": deep})
    assert too_deep.status_code == 422 and "nests at most 8 levels" in too_deep.json()["message"]


async def test_patch_sets_and_null_clears_the_filter_and_the_next_delivery_sees_it(client, team):
    trigger = (await _create(client, team)).json()
    url = f"/v1/triggers/{trigger['id']}"
    closed = {"action": "closed"}
    assert (await _post(client, trigger["token"], closed)).json()["status"] == "accepted"
    not_closed = {"path": "/action", "ne": "closed"}
    set_ = await client.patch(url, headers=team.h("owner"), json={"payload_filter": not_closed})
    assert set_.status_code == 200 and set_.json()["payload_filter"] == not_closed
    assert (await _post(client, trigger["token"], closed)).json()["status"] == "ignored"
    cleared = await client.patch(url, headers=team.h("owner"), json={"payload_filter": None})
    assert cleared.status_code == 200 and cleared.json()["payload_filter"] is None
    assert (await _post(client, trigger["token"], closed)).json()["status"] == "accepted"
    versions = await client.get(f"/v1/autopilots/{team.autopilot_id}/versions", headers=team.h("owner"))
    assert "payload_filter" in json.dumps(versions.json())  # a substantive edit publishes a rule version


async def test_a_schedule_trigger_has_no_payload_filter(client, team):
    made = await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                             json={"kind": "schedule", "cron": "0 * * * *"})
    schedule = made.json()
    edited = await client.patch(f"/v1/triggers/{schedule['id']}", headers=team.h("owner"),
                                json={"payload_filter": {"path": "/a", "exists": True}})
    assert edited.status_code == 422 and "payload_filter" in edited.json()["message"]
    tested = await client.post(f"/v1/triggers/{schedule['id']}/filter-test", headers=team.h("owner"),
                               json={"payload": {}})
    assert tested.status_code == 409 and tested.json()["error"] == "not_a_webhook_trigger"


async def test_a_replay_is_filtered_again_by_the_filter_of_today(client, team):
    trigger = (await _create(client, team)).json()
    first = await _post(client, trigger["token"], {"action": "closed"})
    await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"),
                       json={"payload_filter": {"path": "/action", "in": ["opened", "reopened"]}})
    replay = await client.post(f"/v1/deliveries/{first.json()['delivery_id']}/replay", headers=team.h("owner"))
    assert replay.status_code == 201, replay.text
    copy = await client.get(f"/v1/deliveries/{replay.json()['delivery_id']}", headers=team.h("owner"))
    assert (copy.json()["status"], copy.json()["reason_code"]) == ("ignored", "payload_filter")
    assert copy.json()["reason"].endswith('/action is "closed", not one of ["opened", "reopened"]')


async def test_filter_test_says_whether_a_payload_or_a_stored_delivery_matches_and_which_node_decided(client, team):
    trigger = (await _create(client, team, payload_filter=LABELLED_BUG)).json()
    url = f"/v1/triggers/{trigger['id']}/filter-test"
    opened = await client.post(url, headers=team.h("owner"), json={"payload": {"action": "opened"}})
    assert opened.status_code == 200, opened.text
    assert opened.json() == {"matches": False, "node": "/and/0",
                             "reason": '/action is "opened", not equal to "labeled"'}
    stored = await _post(client, trigger["token"], {"action": "labeled", "label": {"name": "bug"}})
    by_id = await client.post(url, headers=team.h("owner"), json={"delivery_id": stored.json()["delivery_id"]})
    assert by_id.json() == {"matches": True, "node": "/and", "reason": "all 2 conditions of /and hold"}
    candidate = await client.post(url, headers=team.h("owner"), json={
        "delivery_id": stored.json()["delivery_id"], "filter": {"path": "/label/name", "prefix": "wont"}})
    assert candidate.json()["matches"] is False and candidate.json()["node"] == ""
    text = await client.post(url, headers=team.h("owner"), json={"payload": "<Response/>"})
    assert text.json()["matches"] is False and text.json()["reason"] == "/action is absent, not equal to \"labeled\""


async def test_filter_test_refuses_bad_requests_with_codes(client, team):
    trigger = (await _create(client, team)).json()
    url = f"/v1/triggers/{trigger['id']}/filter-test"
    none = await client.post(url, headers=team.h("owner"), json={"payload": {"a": 1}})
    assert none.json() == {"matches": True, "node": None, "reason": "the trigger has no payload filter: every body "
                                                                    "matches"}
    both = await client.post(url, headers=team.h("owner"), json={"payload": {}, "delivery_id": trigger["id"]})
    neither = await client.post(url, headers=team.h("owner"), json={})
    bad = await client.post(url, headers=team.h("owner"), json={"payload": {}, "filter": {"path": "/a", "lt": []}})
    unknown = await client.post(url, headers=team.h("owner"), json={"delivery_id": trigger["id"]})
    assert [r.status_code for r in (both, neither, bad, unknown)] == [422, 422, 422, 404]
    assert "at /lt:" in bad.json()["message"] and unknown.json()["error"] == "not_found"


async def test_filter_test_anonymous_plain_member_and_other_workspace(client, team):
    trigger = (await _create(client, team, payload_filter={"path": "/a", "exists": True})).json()
    url = f"/v1/triggers/{trigger['id']}/filter-test"
    anonymous = await client.post(url, json={"payload": {"a": 1}})
    member = await client.post(url, headers=team.h("member"), json={"payload": {"a": 1}})
    outsider = await client.post(url, headers=team.h("outsider"), json={"payload": {"a": 1}})
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthorized"
    assert member.status_code == 200 and member.json()["matches"] is True  # it reads, writes nothing
    assert outsider.status_code == 404 and outsider.json()["error"] == "not_found"
    theirs = await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("member"),
                               json={"kind": "webhook", "payload_filter": {"path": "/a", "exists": True}})
    assert theirs.status_code == 403  # only writers set a filter
    other_delivery = await _other_workspace_delivery(client, team)
    peek = await client.post(url, headers=team.h("owner"), json={"delivery_id": other_delivery})
    assert peek.status_code == 404  # another workspace's body is never evaluated


async def _other_workspace_delivery(client, team) -> str:
    from tests import factories

    agent = await factories.http_agent(team.other)
    ap = await factories.autopilot(team.other, agent.row["id"])
    made = await client.post(f"/v1/autopilots/{ap['id']}/triggers", headers=team.h("outsider"),
                             json={"kind": "webhook"})
    posted = await _post(client, made.json()["token"], {"a": 1})
    return str(posted.json()["delivery_id"])


async def test_openapi_documents_the_field_and_the_endpoint(client):
    doc = (await client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    assert "payload_filter" in schemas["WebhookTriggerIn"]["properties"]
    assert "payload_filter" in schemas["TriggerPatch"]["properties"]
    assert "payload_filter" in schemas["TriggerOut"]["properties"]
    operation = doc["paths"]["/v1/triggers/{trigger_id}/filter-test"]["post"]
    assert operation["operationId"] == "filter_test"
    assert set(schemas["FilterTestOut"]["properties"]) == {"matches", "reason", "node"}
    assert "payload_filter" in schemas["Ignored"]["properties"]["reason"]["enum"]
