"""Handshakes and replies through the API: saved, validated with codes, shown (a verify token never), answered."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest

META = {"kind": "meta", "verify_token": "meatyhamhock"}
TWIML = {"status": 200, "content_type": "text/xml", "body": "<Response><Message>ok</Message></Response>"}


async def _create(client, team, role: str = "owner", **spec: Any):
    return await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h(role),
                             json={"kind": "webhook", **spec})


def _meta_get(token: str, verify: str = "meatyhamhock") -> str:
    return f"/hooks/{token}?" + urlencode({"hub.mode": "subscribe", "hub.verify_token": verify,
                                           "hub.challenge": "1158201444"})


async def test_meta_handshake_is_saved_with_its_verify_token_encrypted_and_never_shown(client, team, conn):
    made = await _create(client, team, provider="meta", handshake=META, reply=TWIML)
    assert made.status_code == 201, made.text
    trigger = made.json()
    assert trigger["handshake"] == {"kind": "meta"} and trigger["verify_token_hint"] == "hock"
    assert trigger["reply"] == TWIML and "meatyhamhock" not in made.text
    for role in ("owner", "member"):
        shown = await client.get(f"/v1/triggers/{trigger['id']}", headers=team.h(role))
        assert shown.status_code == 200 and "meatyhamhock" not in shown.text
        assert shown.json()["handshake"] == {"kind": "meta"} and shown.json()["verify_token_hint"] == "hock"
    row = await conn.fetchrow("SELECT handshake, verify_token_ct FROM autopilot_trigger WHERE id = $1",
                              trigger["id"])
    assert b"meatyhamhock" not in bytes(row["verify_token_ct"]) and "verify_token" not in row["handshake"]
    answer = await client.get(_meta_get(trigger["token"]))
    assert (answer.status_code, answer.text) == (200, "1158201444")


async def test_a_meta_preset_trigger_gets_its_verify_token_by_patch_and_the_preset_answers(client, team):
    trigger = (await _create(client, team, provider="meta")).json()
    assert trigger["handshake"] is None and trigger["verify_token_hint"] is None
    before = await client.get(_meta_get(trigger["token"]))
    assert (before.status_code, before.json()["error"]) == (409, "handshake_needs_verify_token")
    patched = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"), json={"handshake": META})
    assert patched.status_code == 200 and patched.json()["verify_token_hint"] == "hock", patched.text
    assert (await client.get(_meta_get(trigger["token"]))).text == "1158201444"
    wrong = await client.get(_meta_get(trigger["token"], "meatyhamhocks"))
    assert (wrong.status_code, wrong.json()["error"]) == (403, "verify_token_mismatch")
    # A handshake of another kind drops the token; null goes back to the preset's (which then needs one again).
    other = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"),
                               json={"handshake": {"kind": "echo_query", "param": "challenge"}})
    assert other.json()["verify_token_hint"] is None and other.json()["handshake"]["param"] == "challenge"
    back = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"), json={"handshake": None})
    assert back.status_code == 200 and back.json()["handshake"] is None
    assert (await client.get(_meta_get(trigger["token"]))).status_code == 409


@pytest.mark.parametrize(("spec", "code"), [
    ({"handshake": {"kind": "meta"}}, "handshake_needs_verify_token"),
    ({"handshake": {"kind": "meta", "verify_token": "short"}}, "invalid_handshake"),
    ({"handshake": {"kind": "meta", "verify_token": "has a space in it"}}, "invalid_handshake"),
    ({"handshake": {"kind": "wave"}}, "invalid_handshake"),
    ({"handshake": {"kind": "echo_query"}}, "invalid_handshake"),
    ({"handshake": {"kind": "echo_query", "param": "challenge", "content_type": "text/html"}}, "invalid_handshake"),
    ({"handshake": {"kind": "zoom", "extra": 1}}, "invalid_handshake"),
    ({"reply": {"status": 500}}, "invalid_reply"),
    ({"reply": {"status": 204, "body": "no"}}, "invalid_reply"),
    ({"reply": {"body": "é" * 2049}}, "invalid_reply"),  # 2,049 characters, 4,098 bytes
    ({"reply": {"body": "x" * 4097}}, "invalid_reply"),
    ({"reply": {"content_type": "text/xml\r\nx-injected: 1"}}, "invalid_reply"),
    ({"reply": {"status": 200, "extra": True}}, "invalid_reply"),
])
async def test_bad_handshakes_and_replies_are_422_with_a_code_on_create_and_patch(client, team, spec, code):
    made = await _create(client, team, **spec)
    assert (made.status_code, made.json()["error"]) == (422, code), made.text
    trigger = (await _create(client, team)).json()
    patched = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"), json=spec)
    assert (patched.status_code, patched.json()["error"]) == (422, code), patched.text


async def test_a_reply_of_exactly_4_kib_is_taken(client, team):
    made = await _create(client, team, reply={"body": "x" * 4096})
    assert made.status_code == 201 and made.json()["reply"] == {"status": 200, "content_type": "text/plain",
                                                                "body": "x" * 4096}


async def test_schedule_triggers_have_no_handshake_or_reply(client, team):
    made = await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                             json={"kind": "schedule", "cron": "0 * * * *", "handshake": {"kind": "zoom"}})
    assert made.status_code == 422
    schedule = (await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                                  json={"kind": "schedule", "cron": "0 * * * *"})).json()
    for body in ({"handshake": {"kind": "zoom"}}, {"reply": TWIML}):
        patched = await client.patch(f"/v1/triggers/{schedule['id']}", headers=team.h("owner"), json=body)
        assert (patched.status_code, patched.json()["error"]) == (422, "invalid_request")


async def test_who_may_set_a_handshake_or_reply(client, team):
    assert (await _create(client, team, "member", handshake=META)).status_code == 403
    assert (await _create(client, team, "outsider", handshake=META)).status_code == 404
    anonymous = await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers",
                                  json={"kind": "webhook", "handshake": META})
    assert anonymous.status_code == 401
    trigger = (await _create(client, team)).json()
    path = f"/v1/triggers/{trigger['id']}"
    for role, status in (("member", 403), ("outsider", 404), ("collaborator", 200)):
        answer = await client.patch(path, headers=team.h(role), json={"handshake": META, "reply": TWIML})
        assert answer.status_code == status, (role, answer.text)
    assert (await client.patch(path, json={"reply": TWIML})).status_code == 401
    assert (await client.get(path, headers=team.h("outsider"))).status_code == 404


async def test_the_reply_set_through_the_api_answers_accepted_deliveries(client, team):
    trigger = (await _create(client, team, provider="generic", reply=TWIML)).json()
    r = await client.post(f"/hooks/{trigger['token']}", json={"event": "sms.received"})
    assert (r.status_code, r.text, r.headers["content-type"]) == (200, TWIML["body"], "text/xml")
    back = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"), json={"reply": None})
    assert back.json()["reply"] is None
    r = await client.post(f"/hooks/{trigger['token']}", json={"event": "sms.received"})
    assert r.json()["status"] == "accepted"  # the receipt again (the edit is seen by the very next write)
