"""Deliveries: list and read with headers and body; replay as a new delivery admitted like ingress."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime, timedelta

from autopilot import admission
from hookgate import database
from tests import factories
from worker.deliveries import DeliveryWorker


async def _trigger(client, team, **spec):
    made = await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                             json={"kind": "webhook", "provider": "github"} | spec)
    return made.json()


async def _delivery(conn, team, trigger, status="dispatched", event="github.push", key="gh-1", admit=True):
    """A delivery row as ingress stores it (and its run, as ingress admits it)."""
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    envelope = {"event": event, "payload": {"ref": "refs/heads/main"},
                "request": {"received_at": "2026-01-01T00:00:00Z", "content_type": "application/json"}}
    signature = "invalid" if status == "rejected" else "valid"
    delivery = await factories.delivery(
        conn, trigger, workspace_id=team.world.workspace_id, autopilot_id=team.autopilot_id, body=body,
        content_type="application/json", headers={"x-github-event": "push", "x-hub-signature-256": {"present": True}},
        envelope=envelope, provider="github", event=event, dedupe_key=key, dedupe_source="X-GitHub-Delivery",
        signature_status=signature, status=status)
    if admit and status != "rejected":
        run = await admission.admit(conn, autopilot_id=team.autopilot_id, source="webhook", payload=envelope,
                                    trigger_id=trigger["id"], delivery_id=delivery, heartbeat_timeout_s=120.0)
        await conn.execute("UPDATE webhook_delivery SET run_id = $2 WHERE id = $1", delivery, run.run_id)
    return str(delivery)


async def test_get_delivery_shows_selected_headers_and_body(client, team, conn):
    trigger = await _trigger(client, team)
    delivery = await _delivery(conn, team, trigger)
    got = await client.get(f"/v1/deliveries/{delivery}", headers=team.h("member"))
    assert got.status_code == 200
    body = got.json()
    assert body["headers"]["x-hub-signature-256"] == {"present": True}
    assert json.loads(body["body"]) == {"ref": "refs/heads/main"}
    assert (body["status"], body["signature_status"], body["dedupe_key"]) == ("dispatched", "valid", "gh-1")
    assert body["run_id"] is not None and body["replayed_from"] is None
    listed = (await client.get("/v1/deliveries", headers=team.h("member"),
                               params={"trigger_id": trigger["id"], "status": "dispatched"})).json()
    assert [d["id"] for d in listed["items"]] == [delivery] and "body" not in listed["items"][0]
    assert (await client.get(f"/v1/deliveries/{delivery}", headers=team.h("outsider"))).status_code == 404


async def test_replay_makes_a_new_queued_delivery_with_a_new_run_and_wakes_a_worker(client, team, conn, ctx):
    trigger = await _trigger(client, team)
    original = await _delivery(conn, team, trigger)
    listener = await database.connect(ctx.dsn)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("hookgate_deliveries", lambda *args: heard.put_nowait(args[3]))
    try:
        made = await client.post(f"/v1/deliveries/{original}/replay", headers=team.h("collaborator"))
        assert made.status_code == 201
        body = made.json()
        assert await asyncio.wait_for(heard.get(), 5) == body["delivery_id"]
    finally:
        await listener.close()
    assert body["replayed_from"] == original and body["status"] == "queued" and body["run_id"]
    copy = (await client.get(f"/v1/deliveries/{body['delivery_id']}", headers=team.h("owner"))).json()
    first = (await client.get(f"/v1/deliveries/{original}", headers=team.h("owner"))).json()
    assert copy["body"] == first["body"] and copy["headers"] == first["headers"] and copy["event"] == first["event"]
    assert copy["dedupe_key"] is None and copy["replayed_from"] == original and copy["run_id"] == body["run_id"]
    run = (await client.get(f"/v1/runs/{body['run_id']}", headers=team.h("owner"))).json()
    assert run["source"] == "webhook" and run["delivery_id"] == body["delivery_id"] and run["originator_id"] is None
    assert run["chain"]["delivery"] == {"id": body["delivery_id"], "status": "queued", "reason_code": None,
                                        "reason": None}
    audit = (await client.get("/v1/audit", headers=team.h("owner"), params={"action": "REPLAY"})).json()["items"]
    assert audit[0]["subject_id"] == original and audit[0]["detail"]["delivery_id"] == body["delivery_id"]
    assert audit[0]["actor_id"] == str(team.ids["collaborator"])


async def test_replay_is_idempotent_by_key(client, team, conn):
    trigger = await _trigger(client, team)
    original = await _delivery(conn, team, trigger)
    answers = [await client.post(f"/v1/deliveries/{original}/replay", headers=team.h("owner") | {
        "Idempotency-Key": "replay-1"}) for _ in range(3)]
    assert len({a.json()["delivery_id"] for a in answers}) == 1
    assert await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE replayed_from_delivery_id = $1",
                               original) == 1
    unkeyed = await client.post(f"/v1/deliveries/{original}/replay", headers=team.h("owner"))
    assert unkeyed.json()["delivery_id"] != answers[0].json()["delivery_id"]


async def test_replay_is_ignored_like_ingress_when_the_rule_no_longer_admits_it(client, team, conn):
    trigger = await _trigger(client, team, event_filters=["github.push", "github.issues.*"])
    pushed = await _delivery(conn, team, trigger, key="a")
    opened = await _delivery(conn, team, trigger, event="github.issues.opened", key="b")
    starred = await _delivery(conn, team, trigger, event="github.star.created", key="c", admit=False)
    filtered = (await client.post(f"/v1/deliveries/{starred}/replay", headers=team.h("owner"))).json()
    assert (filtered["status"], filtered["reason_code"], filtered["run_id"]) == ("ignored", "event_filtered", None)
    assert (await client.post(f"/v1/deliveries/{opened}/replay", headers=team.h("owner"))).json()["status"] == "queued"
    await client.post(f"/v1/autopilots/{team.autopilot_id}/pause", headers=team.h("owner"))
    paused = (await client.post(f"/v1/deliveries/{pushed}/replay", headers=team.h("owner"))).json()
    assert (paused["status"], paused["reason_code"]) == ("ignored", "autopilot_paused")
    await client.post(f"/v1/autopilots/{team.autopilot_id}/resume", headers=team.h("owner"))
    await client.patch(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"), json={"enabled": False})
    disabled = (await client.post(f"/v1/deliveries/{pushed}/replay", headers=team.h("owner"))).json()
    assert disabled["reason_code"] == "trigger_disabled"


async def test_a_replay_the_gate_skips_is_dispatched_with_a_skipped_run(client, team, conn):
    trigger = await _trigger(client, team, event_filters=["GitHub.Push"])  # filters ignore case, like ingress
    original = await _delivery(conn, team, trigger)
    await conn.execute("UPDATE agent SET archived_at = now() WHERE id = $1", team.agent_id)
    made = (await client.post(f"/v1/deliveries/{original}/replay", headers=team.h("owner"))).json()
    assert (made["status"], made["reason_code"]) == ("dispatched", "agent_archived")
    run = (await client.get(f"/v1/runs/{made['run_id']}", headers=team.h("owner"))).json()
    assert (run["status"], run["reason_code"]) == ("skipped", "agent_archived")


async def test_forged_deliveries_and_deleted_triggers_cannot_be_replayed(client, team, conn):
    trigger = await _trigger(client, team)
    forged = await _delivery(conn, team, trigger, status="rejected", key="f")
    kept = await _delivery(conn, team, trigger, key="k")
    refused = await client.post(f"/v1/deliveries/{forged}/replay", headers=team.h("owner"))
    assert refused.status_code == 409 and refused.json()["error"] == "rejected_delivery"
    await client.delete(f"/v1/triggers/{trigger['id']}", headers=team.h("owner"))
    gone = await client.post(f"/v1/deliveries/{kept}/replay", headers=team.h("owner"))
    assert gone.status_code == 409 and gone.json()["error"] == "trigger_deleted"
    still_readable = await client.get(f"/v1/deliveries/{kept}", headers=team.h("owner"))
    assert still_readable.status_code == 200


async def test_replay_is_for_writers_only(client, team, conn):
    trigger = await _trigger(client, team)
    original = await _delivery(conn, team, trigger)
    codes = {r: (await client.post(f"/v1/deliveries/{original}/replay", headers=team.h(r))).status_code
             for r in ("owner", "admin", "collaborator", "member", "outsider")}
    assert codes == {"owner": 201, "admin": 201, "collaborator": 201, "member": 403, "outsider": 404}


async def test_a_delivery_held_back_by_pacing_says_so_with_its_next_attempt_until_dispatched(client, team, conn):
    trigger = await _trigger(client, team, rate_limit_per_minute=1)
    shown = await client.get(f"/v1/triggers/{trigger['id']}", headers=team.h("member"))
    assert trigger["rate_limit_per_minute"] == 1 and shown.json()["rate_limit_per_minute"] == 1
    first = await _delivery(conn, team, trigger, status="queued", key="gh-1")
    second = await _delivery(conn, team, trigger, status="queued", key="gh-2")
    worker = DeliveryWorker(team.ctx, holder="t")
    assert await worker.run_once() == 1  # one dispatched, the other over the trigger's budget of 1 a minute

    got = (await client.get(f"/v1/deliveries/{second}", headers=team.h("member"))).json()
    available_at = await conn.fetchval("SELECT available_at FROM webhook_delivery WHERE id = $1", uuid.UUID(second))
    assert (got["status"], got["reason_code"], got["dispatch_attempts"]) == ("queued", "paced", 0)
    assert datetime.fromisoformat(got["next_attempt_at"]) == available_at
    listed = {d["id"]: d for d in (await client.get("/v1/deliveries", headers=team.h("member"))).json()["items"]}
    assert (listed[second]["reason_code"], listed[second]["next_attempt_at"]) == ("paced", got["next_attempt_at"])
    assert (listed[first]["status"], listed[first]["reason_code"], listed[first]["next_attempt_at"]) == (
        "dispatched", None, None)
    run = (await client.get(f"/v1/runs/{got['run_id']}", headers=team.h("member"))).json()
    assert (run["status"], run["reason_code"], run["next_attempt_at"]) == ("pending", "paced", got["next_attempt_at"])
    runs = {r["id"]: r for r in (await client.get("/v1/runs", headers=team.h("member"))).json()["items"]}
    assert runs[got["run_id"]]["reason_code"] == "paced" and runs[listed[first]["run_id"]]["reason_code"] is None

    assert await worker.run_once(now=available_at + timedelta(seconds=1)) == 1  # the next window: dispatched
    got = (await client.get(f"/v1/deliveries/{second}", headers=team.h("member"))).json()
    assert (got["status"], got["reason_code"], got["next_attempt_at"]) == ("dispatched", None, None)
    run = (await client.get(f"/v1/runs/{got['run_id']}", headers=team.h("member"))).json()
    assert (run["status"], run["reason_code"], run["next_attempt_at"]) == ("queued", None, None)
