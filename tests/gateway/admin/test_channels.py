"""The notification-channel endpoints: owners and admins only, 404 across workspaces, validated, audited.

The signing secret is in the creation's answer and nowhere else; a URL passes the egress policy when saved.
Delivery itself is tested in tests/worker/test_alerts.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from autopilot import alerts

BASE = "/v1/notification-channels"


def _body(**extra: Any) -> dict[str, Any]:
    return {"name": "ops", "url": "http://127.0.0.1:9/hook", "events": ["run.failed"]} | extra


async def _create(client, headers, **extra: Any) -> dict[str, Any]:
    made = await client.post(BASE, headers=headers, json=_body(**extra))
    assert made.status_code == 201, made.text
    return dict(made.json())


def _routes(channel_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [("POST", BASE, _body()), ("GET", BASE, None), ("GET", f"{BASE}/{channel_id}", None),
            ("DELETE", f"{BASE}/{channel_id}", None), ("POST", f"{BASE}/{channel_id}/test", None)]


async def test_owners_and_admins_create_list_get_test_and_delete_a_channel(client, team):
    made = await _create(client, team.h("admin"), events=["run.failed", "agent.unhealthy", "run.failed"])
    assert made["signing_secret"].startswith("whsec_") and made["secret_hint"] == made["signing_secret"][-4:]
    assert made["events"] == ["run.failed", "agent.unhealthy"] and made["created_by"] == str(team.ids["admin"])
    shown = {k: v for k, v in made.items() if k != "signing_secret"}
    got = await client.get(f"{BASE}/{made['id']}", headers=team.h("owner"))
    assert got.status_code == 200 and got.json() == shown
    listed = await client.get(BASE, headers=team.h("owner"))
    assert listed.json() == {"items": [shown], "next_cursor": None}
    ping = await client.post(f"{BASE}/{made['id']}/test", headers=team.h("owner"))
    assert ping.status_code == 202 and set(ping.json()) == {"notification_id"}
    gone = await client.delete(f"{BASE}/{made['id']}", headers=team.h("admin"))
    assert gone.status_code == 200 and gone.json() == shown
    assert (await client.get(f"{BASE}/{made['id']}", headers=team.h("owner"))).status_code == 404
    assert (await client.delete(f"{BASE}/{made['id']}", headers=team.h("owner"))).status_code == 404


async def test_the_signing_secret_is_shown_once_and_stored_only_encrypted(client, team, conn):
    made = await _create(client, team.h("owner"))
    secret = made["signing_secret"]
    for path in (BASE, f"{BASE}/{made['id']}"):
        answer = await client.get(path, headers=team.h("owner"))
        assert answer.status_code == 200 and secret not in answer.text and "signing_secret" not in answer.text
    row = await conn.fetchrow("SELECT t::text AS line, signing_secret_ct FROM notification_channel t")
    assert secret not in row["line"] and secret.removeprefix("whsec_") not in row["line"]
    assert team.ctx.keyring.decrypt(bytes(row["signing_secret_ct"]), alerts.secret_context(made["id"])) == secret


async def test_listing_pages_with_a_cursor(client, team):
    ids = [(await _create(client, team.h("owner"), name=f"c{i}"))["id"] for i in range(3)]
    first = (await client.get(BASE, headers=team.h("owner"), params={"limit": 2})).json()
    assert [c["id"] for c in first["items"]] == ids[:2] and first["next_cursor"]
    rest = (await client.get(BASE, headers=team.h("owner"), params={"cursor": first["next_cursor"]})).json()
    assert [c["id"] for c in rest["items"]] == ids[2:] and rest["next_cursor"] is None


async def test_an_anonymous_caller_gets_401_everywhere(client, team):
    made = await _create(client, team.h("owner"))
    for method, path, body in _routes(made["id"]):
        answer = await client.request(method, path, json=body)
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized", (method, path)


@pytest.mark.parametrize("role", ["member", "collaborator"])
async def test_a_plain_member_gets_403_everywhere_and_changes_nothing(client, team, conn, role):
    made = await _create(client, team.h("owner"))
    for method, path, body in _routes(made["id"]):
        answer = await client.request(method, path, headers=team.h(role), json=body)
        assert answer.status_code == 403 and answer.json()["error"] == "forbidden", (method, path, answer.text)
    assert await conn.fetchval("SELECT count(*) FROM notification_channel") == 1
    assert await conn.fetchval("SELECT count(*) FROM notification") == 0


async def test_another_workspaces_channel_is_404_like_an_unknown_one_and_never_listed(client, team, conn):
    made = await _create(client, team.h("owner"))
    for method, path, body in _routes(made["id"])[2:]:
        answer = await client.request(method, path, headers=team.h("outsider"), json=body)
        assert answer.status_code == 404 and answer.json()["error"] == "not_found", (method, path)
    unknown = await client.get(f"{BASE}/00000000-0000-7000-8000-000000000000", headers=team.h("owner"))
    assert unknown.status_code == 404 and unknown.json() == (
        await client.get(f"{BASE}/{made['id']}", headers=team.h("outsider"))).json()
    assert (await client.get(f"{BASE}/not-a-uuid", headers=team.h("owner"))).status_code == 404
    listed = await client.get(BASE, headers=team.h("outsider"))
    assert listed.json() == {"items": [], "next_cursor": None}
    assert await conn.fetchval("SELECT count(*) FROM notification_channel") == 1
    assert await conn.fetchval("SELECT count(*) FROM notification") == 0


@pytest.mark.parametrize("body", [
    {"events": ["run.exploded"]}, {"events": []}, {"events": "run.failed"}, {"name": ""}, {"name": None},
    {"url": "ftp://example.com/x"}, {"url": "not a url"}, {"url": "http://x/" + "a" * 2000}, {"extra": 1},
])
async def test_bad_input_is_422_invalid_request(client, team, conn, body):
    answer = await client.post(BASE, headers=team.h("owner"), json=_body(**body))
    assert answer.status_code == 422 and answer.json()["error"] == "invalid_request", answer.text
    assert await conn.fetchval("SELECT count(*) FROM notification_channel") == 0


async def test_broken_json_and_a_bad_cursor_are_400(client, team):
    broken = await client.post(BASE, headers=team.h("owner") | {"content-type": "application/json"}, content=b"{")
    assert broken.status_code == 400 and broken.json()["error"] == "invalid_json"
    cursor = await client.get(BASE, headers=team.h("owner"), params={"cursor": "!!"})
    assert cursor.status_code == 400 and cursor.json()["error"] == "invalid_cursor"


@pytest.mark.parametrize(("url", "code"), [
    ("http://10.0.0.7/hook", "channel_url_forbidden"),
    ("http://169.254.169.254/latest/meta-data/", "channel_url_forbidden"),
    ("http://user:pw@127.0.0.1:9/hook", "channel_url_forbidden"),
    ("http://hooks.test/hooks/awt_x", "channel_url_forbidden"),
    ("http://no-such-host.invalid/hook", "channel_url_unresolvable"),
])
async def test_the_egress_policy_refuses_a_url_at_create_time(client, team, conn, url, code):
    answer = await client.post(BASE, headers=team.h("owner"), json=_body(url=url))
    assert answer.status_code == 422 and answer.json()["error"] == code, answer.text
    assert "channel URL" in answer.json()["message"] and "pw" not in answer.text
    assert await conn.fetchval("SELECT count(*) FROM notification_channel") == 0


async def test_creation_and_deletion_are_audited_without_the_secret(client, team, conn):
    made = await _create(client, team.h("admin"))
    await client.delete(f"{BASE}/{made['id']}", headers=team.h("owner"))
    rows = await conn.fetch("SELECT action, actor_id, subject_type, detail::text AS detail FROM audit_log "
                            "WHERE subject_id = $1 ORDER BY id", made["id"])
    assert [(r["action"], r["actor_id"], r["subject_type"]) for r in rows] == [
        ("NOTIFICATION_CHANNEL_CREATE", str(team.ids["admin"]), "notification_channel"),
        ("NOTIFICATION_CHANNEL_DELETE", str(team.ids["owner"]), "notification_channel")]
    assert all(made["signing_secret"] not in r["detail"] and "run.failed" in r["detail"] for r in rows)

