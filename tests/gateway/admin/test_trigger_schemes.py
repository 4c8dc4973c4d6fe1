"""Custom signature schemes on triggers, through the API and the ingress: saved, validated, checked, edited."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

HMAC = {"header": "X-Signature", "algorithm": "sha512", "encoding": "base64", "prefix": "v1=",
        "signed": "{timestamp}.{body}", "timestamp_header": "X-Timestamp", "tolerance_s": 300}
DISCORD = {"kind": "public_key", "algorithm": "ed25519", "header": "X-Signature-Ed25519", "encoding": "hex",
           "signed": "{timestamp}{body}", "timestamp_header": "X-Signature-Timestamp"}


async def _create(client, team, role: str = "owner", **spec: Any):
    return await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h(role),
                             json={"kind": "webhook", **spec})


async def _secret(client, team, trigger_id: str, **body: Any):
    return await client.put(f"/v1/triggers/{trigger_id}/signing-secret", headers=team.h("owner"), json=body)


def _hmac_headers(raw: bytes, secret: str, ts: int) -> dict[str, str]:
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + raw, hashlib.sha512).digest()
    return {"content-type": "application/json", "X-Timestamp": str(ts),
            "X-Signature": "v1=" + base64.b64encode(mac).decode()}


async def test_custom_hmac_trigger_accepts_what_its_scheme_signs_and_rejects_the_rest(client, team, conn):
    made = await _create(client, team, provider="custom", signature=HMAC)
    assert made.status_code == 201, made.text
    trigger = made.json()
    defaults = {"kind": "hmac", "signature_part": None, "timestamp_part": None, "timestamp_json": None,
                "timestamp_unit": "s", "secret_encoding": "utf8"}
    assert trigger["provider"] == "custom" and trigger["signature"] == HMAC | defaults
    assert (await _secret(client, team, trigger["id"], secret="an in-house secret")).status_code == 200
    raw, now = b'{"event": "order.paid", "id": 7}', int(time.time())
    good = await client.post(f"/hooks/{trigger['token']}", content=raw,
                             headers=_hmac_headers(raw, "an in-house secret", now))
    assert good.status_code == 200 and good.json()["status"] == "accepted", good.text
    forged = await client.post(f"/hooks/{trigger['token']}", content=raw, headers=_hmac_headers(raw, "a guess", now))
    stale = await client.post(f"/hooks/{trigger['token']}", content=raw,
                              headers=_hmac_headers(raw, "an in-house secret", now - 3612))
    tampered = await client.post(f"/hooks/{trigger['token']}", content=raw + b" ",
                                 headers=_hmac_headers(raw, "an in-house secret", now))
    assert [r.json()["reason"] for r in (forged, stale, tampered)] == [
        "invalid_signature", "expired_timestamp", "invalid_signature"]
    stored = await conn.fetchrow("SELECT provider, event, headers FROM webhook_delivery WHERE id = $1",
                                 good.json()["delivery_id"])
    assert stored["provider"] == "custom" and stored["event"] == "order.paid"
    assert stored["headers"]["x-signature"] is True  # present, never its value


async def test_a_custom_trigger_needs_a_scheme_and_a_bad_one_is_refused_naming_the_part(client, team):
    bare = await _create(client, team, provider="custom")
    bad_template = await _create(client, team, provider="custom", signature={"header": "X-Sig", "signed": "{bodyy}"})
    no_stamp = await _create(client, team, provider="custom", signature={"header": "X-Sig", "signed": "{timestamp}"})
    no_algo = await _create(client, team, provider="custom", signature={"kind": "public_key", "header": "X-Sig"})
    assert [r.status_code for r in (bare, bad_template, no_stamp, no_algo)] == [422] * 4
    assert "signature" in bare.json()["message"]
    assert "unknown placeholder {bodyy}" in json.dumps(bad_template.json())
    assert "no timestamp_header" in json.dumps(no_stamp.json())


async def test_ed25519_trigger_stores_the_senders_public_key_and_verifies_with_it(client, team, conn):
    key = ed25519.Ed25519PrivateKey.generate()
    public_hex = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    trigger = (await _create(client, team, provider="custom", signature=DISCORD)).json()
    as_secret = await _secret(client, team, trigger["id"], secret="not a key at all")
    not_a_key = await _secret(client, team, trigger["id"], public_key="00" * 31)
    assert (as_secret.status_code, not_a_key.status_code) == (422, 422)
    assert "public_key" in as_secret.json()["message"] and "not a public key" in not_a_key.json()["message"]
    saved = await _secret(client, team, trigger["id"], public_key=public_hex)
    assert saved.status_code == 200
    raw, ts = b'{"type": 2, "id": "int_1"}', str(int(time.time()))
    headers = {"content-type": "application/json", "X-Signature-Timestamp": ts,
               "X-Signature-Ed25519": key.sign(ts.encode() + raw).hex(), "Idempotency-Key": "int_1"}
    good = await client.post(f"/hooks/{trigger['token']}", content=raw, headers=headers)
    assert good.json()["status"] == "accepted", good.text
    other = ed25519.Ed25519PrivateKey.generate()
    forged = await client.post(f"/hooks/{trigger['token']}", content=raw,
                               headers={**headers, "X-Signature-Ed25519": other.sign(ts.encode() + raw).hex()})
    assert (forged.status_code, forged.json()["reason"]) == (401, "invalid_signature")
    hmac_trigger = (await _create(client, team, provider="custom", signature=HMAC)).json()
    assert (await _secret(client, team, hmac_trigger["id"], public_key=public_hex)).status_code == 422


async def test_shared_secret_and_basic_auth_triggers(client, team):
    bearer = (await _create(client, team, provider="custom",
                            signature={"kind": "shared_secret", "header": "Authorization", "prefix": "Bearer "})).json()
    basic = (await _create(client, team, provider="custom", signature={"kind": "basic_auth"})).json()
    in_query = {"kind": "shared_secret", "query": "api_key"}
    query = (await _create(client, team, provider="custom", signature=in_query)).json()
    for trigger, secret in ((bearer, "tok-0123456789"), (basic, "hooks:pa55word"), (query, "q-0123456789")):
        assert (await _secret(client, team, trigger["id"], secret=secret)).status_code == 200
    body = {"event": "x"}
    ok = [await client.post(f"/hooks/{bearer['token']}", json=body,
                            headers={"Authorization": "Bearer tok-0123456789"}),
          await client.post(f"/hooks/{basic['token']}", json=body,
                            headers={"Authorization": "Basic " + base64.b64encode(b"hooks:pa55word").decode()}),
          await client.post(f"/hooks/{query['token']}?api_key=q-0123456789", json=body)]
    assert [r.json()["status"] for r in ok] == ["accepted"] * 3
    bad = [await client.post(f"/hooks/{bearer['token']}", json=body,
                             headers={"Authorization": "Bearer tok-012345678"}),
           await client.post(f"/hooks/{basic['token']}", json=body,
                             headers={"Authorization": "Basic " + base64.b64encode(b"hooks:pa55wore").decode()}),
           await client.post(f"/hooks/{query['token']}", json=body)]
    assert [r.json()["reason"] for r in bad] == ["invalid_signature", "invalid_signature", "missing_signature"]


async def test_a_scheme_on_a_preset_replaces_its_check_and_null_puts_the_preset_back(client, team):
    trigger = (await _create(client, team, provider="github")).json()
    await _secret(client, team, trigger["id"], secret="It's a Secret to Everybody")
    raw = b'{"action": "opened"}'
    hub = "sha256=" + hmac.new(b"It's a Secret to Everybody", raw, hashlib.sha256).hexdigest()
    github = {"content-type": "application/json", "X-GitHub-Event": "issues", "X-Hub-Signature-256": hub}
    shared = {"kind": "shared_secret", "header": "X-Token"}
    patched = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"), json={"signature": shared})
    assert patched.status_code == 200 and patched.json()["signature"]["kind"] == "shared_secret"
    as_token = await client.post(f"/hooks/{trigger['token']}", content=raw,
                                 headers={**github, "X-GitHub-Delivery": "d1", "X-Token": "It's a Secret to Everybody"})
    assert as_token.json()["status"] == "accepted"
    assert (await client.get(f"/v1/deliveries/{as_token.json()['delivery_id']}", headers=team.h("owner"))
            ).json()["event"] == "github.issues.opened"  # the preset still names the event
    url = f"/hooks/{trigger['token']}"
    hub_now = await client.post(url, content=raw, headers={**github, "X-GitHub-Delivery": "d2"})
    assert hub_now.json()["reason"] == "missing_signature"
    back = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"), json={"signature": None})
    assert back.status_code == 200 and back.json()["signature"] is None
    hub_again = await client.post(url, content=raw, headers={**github, "X-GitHub-Delivery": "d3"})
    assert hub_again.json()["status"] == "accepted"
    custom = (await _create(client, team, provider="custom", signature=shared)).json()
    unset = await client.patch(f"/v1/triggers/{custom['id']}", headers=team.h("owner"), json={"signature": None})
    assert unset.status_code == 422


async def test_only_writers_set_a_scheme_and_another_workspace_sees_nothing(client, team):
    trigger = (await _create(client, team, provider="custom", signature=HMAC)).json()
    for role, status in (("member", 403), ("outsider", 404), ("collaborator", 200)):
        patched = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h(role),
                                     json={"signature": {**HMAC, "tolerance_s": 60}})
        assert patched.status_code == status, (role, patched.text)
    assert (await _create(client, team, "member", provider="custom", signature=HMAC)).status_code == 403
    anonymous = await client.patch(f"/v1/triggers/{trigger['id']}", json={"signature": HMAC})
    assert anonymous.status_code == 401


async def test_editing_the_scheme_publishes_a_rule_version(client, team):
    trigger = (await _create(client, team, provider="custom", signature=HMAC)).json()
    before = (await client.get(f"/v1/autopilots/{team.autopilot_id}/versions", headers=team.h("owner"))).json()
    await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"),
                       json={"signature": {**HMAC, "tolerance_s": 60}})
    same = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"),
                              json={"signature": {**HMAC, "tolerance_s": 60}})
    after = (await client.get(f"/v1/autopilots/{team.autopilot_id}/versions", headers=team.h("owner"))).json()
    assert same.status_code == 200
    assert len(after["items"]) == len(before["items"]) + 1


# -- dedupe and event sources --------------------------------------------------------------------------------


async def test_twilio_without_its_idempotency_header_dedupes_on_the_message_and_its_status(client, team):
    trigger = (await _create(client, team, provider="twilio")).json()
    form = {"content-type": "application/x-www-form-urlencoded"}

    async def send(status: str):
        return (await client.post(f"/hooks/{trigger['token']}", headers=form,
                                  content=f"MessageSid=SM1&AccountSid=AC1&MessageStatus={status}")).json()

    first, again, delivered = await send("sent"), await send("sent"), await send("delivered")
    assert (first["status"], again["status"], delivered["status"]) == ("accepted", "duplicate", "accepted")
    assert again["delivery_id"] == first["delivery_id"]
    got = (await client.get(f"/v1/deliveries/{first['delivery_id']}", headers=team.h("owner"))).json()
    assert got["dedupe_key"] == "SM1:sent"


async def test_a_trigger_reads_its_dedupe_key_and_event_where_it_says(client, team):
    made = await _create(client, team, provider="custom", signature={"kind": "shared_secret", "query": "k"},
                         dedupe_key_source="json:/data/id", event_source="header:X-Kind")
    assert made.status_code == 201, made.text
    trigger = made.json()
    assert (trigger["dedupe_key_source"], trigger["event_source"]) == ("json:/data/id", "header:x-kind")
    url = f"/hooks/{trigger['token']}"
    first = await client.post(url, json={"data": {"id": "obj_1"}}, headers={"X-Kind": "Item Created"})
    again = await client.post(url, json={"data": {"id": "obj_1"}}, headers={"X-Kind": "Item Created"})
    other = await client.post(url, json={"data": {"id": 2}}, headers={"X-Kind": "Item Created"})
    assert [r.json()["status"] for r in (first, again, other)] == ["accepted", "duplicate", "accepted"]
    got = (await client.get(f"/v1/deliveries/{first.json()['delivery_id']}", headers=team.h("owner"))).json()
    assert (got["event"], got["dedupe_key"]) == ("item_created", "obj_1")
    patched = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"),
                                 json={"event_source": "query:type", "dedupe_key_source": "form:Id"})
    assert patched.status_code == 200, patched.text
    form = {"content-type": "application/x-www-form-urlencoded"}
    by_form = await client.post(url + "?type=Form.Sent", content="Id=f1&x=1", headers=form)
    by_form_again = await client.post(url + "?type=Form.Sent", content="Id=f1&x=2", headers=form)
    assert [r.json()["status"] for r in (by_form, by_form_again)] == ["accepted", "duplicate"]
    got = (await client.get(f"/v1/deliveries/{by_form.json()['delivery_id']}", headers=team.h("owner"))).json()
    assert got["event"] == "form.sent"
    back = await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"),
                              json={"event_source": None, "dedupe_key_source": None})
    assert (back.json()["event_source"], back.json()["dedupe_key_source"]) == (None, None)


async def test_a_bad_source_is_refused(client, team):
    for source in ("body:id", "json:id", "header:", "header:X Y", "query: ", "cookie:a"):
        made = await _create(client, team, provider="generic", dedupe_key_source=source)
        assert made.status_code == 422, (source, made.text)
        assert "dedupe_key_source" in made.text


async def test_a_text_body_is_stored_raw_and_carried_as_text(client, team, conn):
    trigger = (await _create(client, team, provider="custom", signature={"kind": "shared_secret", "query": "k"},
                             event_source="query:event")).json()
    await _secret(client, team, trigger["id"], secret="k-0123456789")
    xml = b"<Event><Id>42</Id></Event>"
    answer = await client.post(f"/hooks/{trigger['token']}?k=k-0123456789&event=order.paid", content=xml,
                               headers={"content-type": "application/xml"})
    assert answer.json()["status"] == "accepted", answer.text
    row = await conn.fetchrow("SELECT body, event FROM webhook_delivery WHERE id = $1", answer.json()["delivery_id"])
    assert (bytes(row["body"]), row["event"]) == (xml, "order.paid")
    run = await conn.fetchrow("SELECT payload FROM autopilot_run WHERE id = $1", answer.json()["run_id"])
    assert run["payload"]["payload"] == xml.decode() and run["payload"]["request"]["format"] == "text"


async def test_a_rejected_delivery_says_which_part_failed_to_members_and_nothing_more_to_the_sender(client, team):
    trigger = (await _create(client, team, provider="custom", signature=HMAC)).json()
    assert (await _secret(client, team, trigger["id"], secret="an in-house secret Qz9!")).status_code == 200
    raw, now = b'{"event": "order.paid"}', int(time.time())
    stale = await client.post(f"/hooks/{trigger['token']}", content=raw,
                              headers=_hmac_headers(raw, "an in-house secret Qz9!", now - 3612))
    forged = await client.post(f"/hooks/{trigger['token']}", content=raw,
                               headers=_hmac_headers(raw, "a guess at it", now))
    assert (stale.status_code, forged.status_code) == (401, 401)
    assert "Qz9!" not in stale.text + forged.text and "3,61" not in stale.text  # the sender learns the code only
    seen = [(await client.get(f"/v1/deliveries/{r.json()['delivery_id']}", headers=team.h("owner"))).json()
            for r in (stale, forged)]
    assert seen[0]["reason_code"] == "expired_timestamp"
    assert seen[0]["reason"] in ("timestamp 3,612 s old, tolerance 300 s", "timestamp 3,613 s old, tolerance 300 s")
    assert seen[1]["reason"] == ("the HMAC-SHA512 of {timestamp}.{body} in header X-Signature does not match the one "
                                 "made with the secret ending …Qz9!")
