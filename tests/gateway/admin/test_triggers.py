"""Triggers: kinds and their fields, token rotation, write-only secrets, schedule validation and preview."""

from __future__ import annotations

import asyncio
from datetime import datetime

from autopilot import rules
from hookgate import crypto


async def _create(client, team, **spec):
    return await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"), json=spec)


async def test_webhook_trigger_answers_its_token_and_url_and_stores_only_digest_and_ciphertext(client, team, conn):
    made = await _create(client, team, kind="webhook", provider="github", event_filters=["github.push"])
    assert made.status_code == 201
    body = made.json()
    assert (body["kind"], body["provider"], body["enabled"]) == ("webhook", "github", True)
    assert crypto.token_shape_ok(body["token"], "awt_") and body["url"] == f"http://hooks.test/hooks/{body['token']}"
    row = await conn.fetchrow("SELECT * FROM autopilot_trigger WHERE id = $1", body["id"])
    assert bytes(row["token_digest"]) == crypto.digest(body["token"])
    assert body["token"].encode() not in bytes(row["token_ct"])


async def test_webhook_triggers_refuse_cron_fields_and_schedule_triggers_refuse_webhook_fields(client, team):
    with_cron = await _create(client, team, kind="webhook", cron="* * * * *")
    with_zone = await _create(client, team, kind="webhook", timezone="UTC")
    with_provider = await _create(client, team, kind="schedule", cron="* * * * *", provider="github")
    unknown_kind = await _create(client, team, kind="email")
    assert [a.status_code for a in (with_cron, with_zone, with_provider, unknown_kind)] == [422] * 4
    webhook = (await _create(client, team, kind="webhook")).json()
    patched = await client.patch(f"/v1/triggers/{webhook['id']}", headers=team.h("owner"), json={"cron": "0 * * * *"})
    assert patched.status_code == 422 and "cron" in patched.json()["message"]


async def test_schedule_trigger_validates_cron_and_zone_and_plans_its_first_fire(client, team, conn):
    bad_cron = await _create(client, team, kind="schedule", cron="61 * * * *")
    bad_zone = await _create(client, team, kind="schedule", cron="0 9 * * *", timezone="Mars/Olympus")
    assert (bad_cron.status_code, bad_zone.status_code) == (422, 422)
    assert bad_cron.json()["error"] == "invalid_schedule"
    made = await _create(client, team, kind="schedule", cron="0  9 * * 1-5", timezone="Europe/Berlin")
    assert made.status_code == 201
    body = made.json()
    assert (body["cron"], body["timezone"], body["overlap_policy"]) == ("0 9 * * 1-5", "Europe/Berlin", "skip")
    assert "token" not in body
    fire = datetime.fromisoformat(body["next_fire_at"])
    assert fire > await conn.fetchval("SELECT now()") and fire.utcoffset().total_seconds() == 0
    assert fire.hour in (7, 8) and fire.minute == 0  # 09:00 Berlin is 07:00 or 08:00 UTC


async def test_preview_lists_occurrences_in_utc_and_local_time(client, team):
    made = (await _create(client, team, kind="schedule", cron="30 2 * * *", timezone="America/New_York")).json()
    preview = await client.get(f"/v1/triggers/{made['id']}/preview", headers=team.h("member"), params={"count": 3})
    assert preview.status_code == 200
    occurrences = preview.json()["occurrences"]
    assert len(occurrences) == 3 and all(o["utc"].endswith("Z") for o in occurrences)
    assert all(datetime.fromisoformat(o["local"]).strftime("%H:%M") == "02:30" for o in occurrences)
    webhook = (await _create(client, team, kind="webhook")).json()
    refused = await client.get(f"/v1/triggers/{webhook['id']}/preview", headers=team.h("owner"))
    too_many = await client.get(f"/v1/triggers/{made['id']}/preview", headers=team.h("owner"), params={"count": 0})
    assert (refused.status_code, too_many.status_code) == (409, 422)


async def test_schedule_changes_notify_the_schedulers(client, team, ctx):
    from hookgate import database

    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await database.connect(ctx.dsn)
    await listener.add_listener("hookgate_triggers", lambda *args: heard.put_nowait(args[3]))
    try:
        made = (await _create(client, team, kind="schedule", cron="*/10 * * * *")).json()
        assert await asyncio.wait_for(heard.get(), 5) == made["id"]
        edited = await client.patch(f"/v1/triggers/{made['id']}", headers=team.h("owner"),
                                    json={"cron": "0 * * * *", "timezone": "Asia/Tokyo"})
        assert edited.status_code == 200 and edited.json()["cron"] == "0 * * * *"
        assert await asyncio.wait_for(heard.get(), 5) == made["id"]
        await client.post(f"/v1/autopilots/{team.autopilot_id}/pause", headers=team.h("owner"))
        assert await asyncio.wait_for(heard.get(), 5) == made["id"]
        assert (await client.delete(f"/v1/triggers/{made['id']}", headers=team.h("owner"))).status_code == 200
        assert await asyncio.wait_for(heard.get(), 5) == made["id"]
        gone = await client.get(f"/v1/triggers/{made['id']}", headers=team.h("owner"))
        assert gone.status_code == 404
    finally:
        await listener.close()


async def test_rotate_token_replaces_the_digest_at_once_and_is_audited(client, team, conn):
    made = (await _create(client, team, kind="webhook")).json()
    rotated = await client.post(f"/v1/triggers/{made['id']}/rotate-token", headers=team.h("collaborator"))
    assert rotated.status_code == 200
    new = rotated.json()
    assert new["token"] != made["token"] and new["url"] == f"http://hooks.test/hooks/{new['token']}"
    assert await conn.fetchval("SELECT count(*) FROM autopilot_trigger WHERE token_digest = $1",
                               crypto.digest(made["token"])) == 0
    row = await conn.fetchrow("SELECT * FROM autopilot_trigger WHERE id = $1", made["id"])
    assert bytes(row["token_digest"]) == crypto.digest(new["token"])
    assert team.ctx.keyring.decrypt(row["token_ct"], rules.token_context(bytes(row["token_digest"]))) == new["token"]
    seen = (await client.get(f"/v1/triggers/{made['id']}", headers=team.h("owner"))).json()
    assert seen["token"] == new["token"]
    audit = (await client.get("/v1/audit", headers=team.h("owner"),
                              params={"subject_id": made["id"], "action": "TOKEN_ROTATE"})).json()["items"]
    assert len(audit) == 1 and audit[0]["actor_id"] == str(team.ids["collaborator"])
    assert made["token"] not in str(audit) and new["token"] not in str(audit)


async def test_signing_secret_is_write_only_with_a_hint_and_a_grace_window(client, team, conn):
    made = (await _create(client, team, kind="webhook", provider="github")).json()
    first = await client.put(f"/v1/triggers/{made['id']}/signing-secret", headers=team.h("owner"),
                             json={"secret": "first-secret-AAAA"})
    assert first.json() == {"hint": "AAAA"}
    second = await client.put(f"/v1/triggers/{made['id']}/signing-secret", headers=team.h("owner"),
                              json={"secret": "second-secret-BBBB", "grace_seconds": 600})
    assert second.json() == {"hint": "BBBB"}
    seen = (await client.get(f"/v1/triggers/{made['id']}", headers=team.h("owner"))).json()
    assert seen["signing_secret_hint"] == "BBBB" and "second-secret-BBBB" not in str(seen)
    assert seen["previous_secret_expires_at"] is not None
    row = await conn.fetchrow("SELECT * FROM autopilot_trigger WHERE id = $1", made["id"])
    context = rules.signing_secret_context(row["id"])
    assert team.ctx.keyring.decrypt(row["signing_secret_ct"], context) == "second-secret-BBBB"
    assert team.ctx.keyring.decrypt(row["previous_secret_ct"], context) == "first-secret-AAAA"
    removed = await client.delete(f"/v1/triggers/{made['id']}/signing-secret", headers=team.h("owner"))
    assert removed.json() == {"hint": None}
    assert await conn.fetchval("SELECT signing_secret_ct FROM autopilot_trigger WHERE id = $1", made["id"]) is None
    actions = (await client.get("/v1/audit", headers=team.h("owner"),
                                params={"subject_id": made["id"], "action": "SECRET_SET"})).json()["items"]
    assert [a["detail"]["removed"] for a in actions] == [True, False, False]
    assert "first-secret" not in str(actions) and "second-secret" not in str(actions)
    schedule = (await _create(client, team, kind="schedule", cron="@daily")).json()
    refused = await client.put(f"/v1/triggers/{schedule['id']}/signing-secret", headers=team.h("owner"),
                               json={"secret": "whatever-1234"})
    assert refused.status_code == 409


async def test_deleting_a_webhook_trigger_frees_its_token(client, team, conn):
    made = (await _create(client, team, kind="webhook")).json()
    deleted = await client.delete(f"/v1/triggers/{made['id']}", headers=team.h("owner"))
    assert deleted.status_code == 200 and deleted.json()["deleted_at"] is not None and "token" not in deleted.json()
    assert await conn.fetchval("SELECT count(*) FROM autopilot_trigger WHERE token_digest = $1",
                               crypto.digest(made["token"])) == 0
    again = await client.delete(f"/v1/triggers/{made['id']}", headers=team.h("owner"))
    assert again.status_code == 404


async def test_re_enabling_a_schedule_plans_from_now_not_from_a_stale_time(client, team, conn):
    made = (await _create(client, team, kind="schedule", cron="0 * * * *")).json()
    await client.patch(f"/v1/triggers/{made['id']}", headers=team.h("owner"), json={"enabled": False})
    await conn.execute("UPDATE autopilot_trigger SET next_fire_at = now() - interval '3 days' WHERE id = $1",
                       made["id"])
    enabled = (await client.patch(f"/v1/triggers/{made['id']}", headers=team.h("owner"), json={"enabled": True})).json()
    assert datetime.fromisoformat(enabled["next_fire_at"]) > await conn.fetchval("SELECT now()")


async def test_a_trigger_change_with_an_explicit_null_is_422_and_changes_nothing(client, team):
    webhook = (await _create(client, team, kind="webhook", provider="github", rate_limit_per_minute=30)).json()
    for body in ({"enabled": None}, {"provider": None}, {"rate_limit_per_minute": None}, {"event_filters": None}):
        answer = await client.patch(f"/v1/triggers/{webhook['id']}", headers=team.h("owner"), json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert f"{next(iter(body))}: may not be null" in answer.json()["message"]
    shown = (await client.get(f"/v1/triggers/{webhook['id']}", headers=team.h("owner"))).json()
    assert (shown["enabled"], shown["provider"], shown["rate_limit_per_minute"]) == (True, "github", 30)
