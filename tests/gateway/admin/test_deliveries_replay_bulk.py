"""Bulk replay: ``POST /v1/deliveries/replay`` replays every delivery a filter selects, each like a single replay.

Scoped to the caller's workspace and to the autopilots the caller may write; refused without a filter;
a dry run changes nothing; idempotent by key; audited once (REPLAY_BULK); the copies reach a real agent.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from gateway.app import create_app, shutdown
from tests import factories
from tests.gateway.admin.conftest import bearer
from tests.gateway.admin.test_deliveries import _delivery, _trigger
from tests.worker.conftest import AgentServer, add_delivery, agent_server, wctx  # noqa: F401
from worker.deliveries import DeliveryWorker
from worker.push import Pusher

URL = "/v1/deliveries/replay"
ZERO = "00000000-0000-0000-0000-00000000000f"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


async def _at(conn: Any, delivery: str, when: datetime) -> str:
    await conn.execute("UPDATE webhook_delivery SET received_at = $2 WHERE id = $1", delivery, when)
    return delivery


async def _many(conn: Any, team: Any, trigger: dict[str, Any], count: int, status: str = "failed") -> list[str]:
    """``count`` stored deliveries of ``trigger`` (no runs), received one second apart from T0, oldest first."""
    rows = await conn.fetch(
        """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, provider, event, envelope,
                                         signature_status, status, received_at)
           SELECT $1, $2, $3, 'github', 'github.push', jsonb_build_object('event', 'github.push', 'payload',
                  jsonb_build_object('n', g)), 'valid', $5, $6::timestamptz + make_interval(secs => g)
           FROM generate_series(1, $4) g RETURNING id, received_at""",
        team.world.workspace_id, trigger["id"], team.autopilot_id, count, status, T0)
    return [str(r["id"]) for r in sorted(rows, key=lambda r: r["received_at"])]


async def _counts(conn: Any) -> tuple[int, int, int]:
    return (await conn.fetchval("SELECT count(*) FROM webhook_delivery"),
            await conn.fetchval("SELECT count(*) FROM autopilot_run"),
            await conn.fetchval("SELECT count(*) FROM audit_log"))


async def _matched(client: httpx.AsyncClient, team: Any, role: str = "owner", **filters: Any) -> set[str]:
    """The originals a dry run with ``filters`` selects."""
    got = await client.post(URL, headers=team.h(role), json=filters | {"dry_run": True})
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["replayed"] == 0 and body["matched"] == len(body["delivery_ids"])
    return set(body["delivery_ids"])


async def test_bulk_replay_refuses_the_anonymous_an_empty_filter_and_bad_input(client, team):
    assert (await client.post(URL, json={"status": ["failed"]})).status_code == 401
    bad = {"status": ["failed"], "color": "red"}
    empty = await client.post(URL, headers=team.h("owner"), json={"dry_run": True, "limit": 10})
    assert empty.status_code == 422 and empty.json()["error"] == "filter_required"
    for body in (bad, {"status": ["failed"], "limit": 10_001}, {"status": ["failed"], "limit": 0},
                 {"status": ["rejected"]}, {"status": []}, {"received_after": "2026-03-01T12:00:00"},
                 {"received_after": _iso(T0), "received_before": _iso(T0)}, {"trigger_id": "nope"},
                 {"status": "failed"}, {"event": ""}, {"run_status": ["done"]}, {"run_status": []}):
        got = await client.post(URL, headers=team.h("owner"), json=body)
        assert got.status_code == 422 and got.json()["error"] == "invalid_request", (body, got.text)
    broken = await client.post(URL, headers=team.h("owner"), content=b"{")
    assert broken.status_code == 400 and broken.json()["error"] == "invalid_json"


async def test_bulk_replay_only_touches_autopilots_the_caller_may_write(client, team, conn):
    trigger = await _trigger(client, team)
    mine = await _delivery(conn, team, trigger, status="failed", key="a")
    agent = await factories.http_agent(team.world, name="other")
    other_ap = await factories.autopilot(team.world, agent.row["id"], title="other")
    other_trigger, _ = await factories.webhook_trigger(team.world, other_ap, provider="github")
    theirs = str(await factories.delivery(conn, other_trigger, provider="github", event="github.push", envelope={},
                                          signature_status="valid", status="failed"))
    for role in ("owner", "admin"):
        assert await _matched(client, team, role, status=["failed"]) == {mine, theirs}
    # A collaborator of one autopilot: only its deliveries; asking for another's by name is refused.
    assert await _matched(client, team, "collaborator", status=["failed"]) == {mine}
    refused = await client.post(URL, headers=team.h("collaborator"), json={"autopilot_id": str(other_ap["id"])})
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    # A member who writes no autopilot: nothing matches; naming one, or its trigger, is refused.
    assert await _matched(client, team, "member", status=["failed"]) == set()
    for name, value in (("autopilot_id", team.autopilot_id), ("trigger_id", trigger["id"])):
        refused = await client.post(URL, headers=team.h("member"), json={name: value})
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden", refused.text
    # Another workspace: the ids are not found (as unknown ids), and its filters never reach this workspace.
    for name, value in (("autopilot_id", team.autopilot_id), ("trigger_id", trigger["id"])):
        hidden = await client.post(URL, headers=team.h("outsider"), json={name: value})
        unknown = await client.post(URL, headers=team.h("outsider"), json={name: ZERO})
        assert hidden.status_code == unknown.status_code == 404
        assert hidden.json() == unknown.json()
    assert await _matched(client, team, "outsider", status=["failed"]) == set()
    got = await client.post(URL, headers=team.h("outsider"), json={"status": ["failed"]})
    assert got.json() == {"matched": 0, "replayed": 0, "delivery_ids": []}
    assert await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE replayed_from_delivery_id IS NOT NULL") == 0


async def test_a_dry_run_changes_nothing(client, team, conn):
    trigger = await _trigger(client, team)
    originals = await _many(conn, team, trigger, 3)
    before = await _counts(conn)
    got = await client.post(URL, headers=team.h("owner"), json={"trigger_id": trigger["id"], "dry_run": True})
    assert got.status_code == 200
    assert got.json() == {"matched": 3, "replayed": 0, "delivery_ids": originals}
    assert await _counts(conn) == before


async def test_each_filter_narrows_the_selection(client, team, conn):
    first = await _trigger(client, team)
    second = await _trigger(client, team)
    a = await _at(conn, await _delivery(conn, team, first, status="failed", key="a"), T0)
    b = await _at(conn, await _delivery(conn, team, first, status="dispatched", key="b", event="github.issues"), T0
                  + timedelta(minutes=10))
    c = await _at(conn, await _delivery(conn, team, second, status="ignored", key="c", admit=False),
                  T0 + timedelta(minutes=20))
    d = await _at(conn, await _delivery(conn, team, second, status="failed", key="d"), T0 + timedelta(minutes=30))
    await _at(conn, await _delivery(conn, team, first, status="rejected", key="r"), T0)  # never replayable
    ap = await factories.autopilot(team.world, team.agent_id, title="elsewhere")
    elsewhere_trigger, _ = await factories.webhook_trigger(team.world, ap, provider="github")
    e = str(await factories.delivery(conn, elsewhere_trigger, provider="github", event="github.push", envelope={},
                                     signature_status="valid", status="failed", received_at=T0 + timedelta(minutes=40)))
    assert await _matched(client, team, received_after=_iso(T0 - timedelta(days=1))) == {a, b, c, d, e}
    assert await _matched(client, team, trigger_id=first["id"]) == {a, b}
    assert await _matched(client, team, autopilot_id=team.autopilot_id) == {a, b, c, d}
    assert await _matched(client, team, autopilot_id=str(ap["id"])) == {e}
    assert await _matched(client, team, status=["failed"]) == {a, d, e}
    assert await _matched(client, team, status=["failed", "ignored"]) == {a, c, d, e}
    assert await _matched(client, team, event="github.issues") == {b}
    await conn.execute("UPDATE autopilot_run SET status = 'failed' WHERE webhook_delivery_id = $1", a)
    await conn.execute("UPDATE autopilot_run SET status = 'completed' WHERE webhook_delivery_id = $1", b)
    assert await _matched(client, team, run_status=["failed"]) == {a}  # c and e have no run
    assert await _matched(client, team, run_status=["failed", "pending"]) == {a, d}
    after, before = T0 + timedelta(minutes=10), T0 + timedelta(minutes=30)
    assert await _matched(client, team, received_after=_iso(after)) == {b, c, d, e}
    assert await _matched(client, team, received_before=_iso(before)) == {a, b, c}
    assert await _matched(client, team, received_after=_iso(after), received_before=_iso(before)) == {b, c}
    assert await _matched(client, team, trigger_id=second["id"], status=["failed"]) == {d}
    # A deleted trigger's deliveries cannot be replayed, so they are not selected.
    await client.delete(f"/v1/triggers/{second['id']}", headers=team.h("owner"))
    assert await _matched(client, team, autopilot_id=team.autopilot_id) == {a, b}


async def test_limit_takes_the_oldest_and_ids_are_capped_at_100(client, team, conn):
    trigger = await _trigger(client, team)
    originals = await _many(conn, team, trigger, 105)
    two = await client.post(URL, headers=team.h("owner"), json={"trigger_id": trigger["id"], "limit": 2,
                                                                "dry_run": True})
    assert two.json() == {"matched": 2, "replayed": 0, "delivery_ids": originals[:2]}
    got = await client.post(URL, headers=team.h("owner"), json={"trigger_id": trigger["id"]})
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["matched"], body["replayed"], len(body["delivery_ids"])) == (105, 105, 100)
    copies = dict(await conn.fetch("SELECT id::text, replayed_from_delivery_id::text FROM webhook_delivery "
                                   "WHERE replayed_from_delivery_id IS NOT NULL"))
    assert len(copies) == 105 and sorted(copies.values()) == sorted(originals)
    assert [copies[i] for i in body["delivery_ids"]] == originals[:100]  # in the originals' order


async def test_idempotency_key_replays_the_answer_and_refuses_another_body(client, team, conn):
    trigger = await _trigger(client, team)
    await _many(conn, team, trigger, 3)
    keyed = team.h("owner") | {"Idempotency-Key": "bulk-1"}
    answers = [await client.post(URL, headers=keyed, json={"trigger_id": trigger["id"]}) for _ in range(3)]
    assert {a.status_code for a in answers} == {200}
    assert answers[0].json() == answers[1].json() == answers[2].json()
    assert answers[0].json()["replayed"] == 3
    assert await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE replayed_from_delivery_id IS NOT NULL"
                               ) == 3
    other = await client.post(URL, headers=keyed, json={"trigger_id": trigger["id"], "limit": 2})
    assert other.status_code == 422 and other.json()["error"] == "idempotency_key_reused"
    audit = (await client.get("/v1/audit", headers=team.h("owner"), params={"action": "REPLAY_BULK"})).json()
    assert len(audit["items"]) == 1


async def test_one_audit_row_with_the_filter_and_counts(client, team, conn):
    trigger = await _trigger(client, team, event_filters=["github.push"])
    pushed = await _many(conn, team, trigger, 2)
    starred = await _at(conn, await _delivery(conn, team, trigger, status="failed", key="s",
                                              event="github.star.created", admit=False), T0)
    got = await client.post(URL, headers=team.h("collaborator"), json={
        "trigger_id": trigger["id"], "status": ["failed"], "received_after": _iso(T0 - timedelta(hours=1))})
    assert got.json()["replayed"] == 3
    [entry] = (await client.get("/v1/audit", headers=team.h("owner"), params={"action": "REPLAY_BULK"})).json()["items"]
    assert entry["actor_id"] == str(team.ids["collaborator"]) and entry["subject_type"] == "workspace"
    assert entry["subject_id"] == str(team.world.workspace_id)
    detail = entry["detail"]
    assert detail["filter"] == {"trigger_id": trigger["id"], "autopilot_id": None, "status": ["failed"],
                                "run_status": None, "event": None, "received_after": _iso(T0 - timedelta(hours=1)),
                                "received_before": None, "limit": 1000}
    assert (detail["matched"], detail["replayed"]) == (3, 3)
    assert detail["statuses"] == {"queued": 2, "ignored": 1}
    # Each copy is admitted like a single replay (the filtered event is ignored), with no REPLAY row of its own.
    rows = await conn.fetch("SELECT replayed_from_delivery_id::text AS original, status, reason_code "
                            "FROM webhook_delivery WHERE replayed_from_delivery_id IS NOT NULL")
    assert {r["original"]: (r["status"], r["reason_code"]) for r in rows} == {
        pushed[0]: ("queued", None), pushed[1]: ("queued", None), starred: ("ignored", "event_filtered")}
    assert (await client.get("/v1/audit", headers=team.h("owner"), params={"action": "REPLAY"})).json()["items"] == []


async def test_a_replay_of_a_replay_links_to_the_delivery_it_copies(client, team, conn):
    trigger = await _trigger(client, team)
    original = await _delivery(conn, team, trigger, status="failed")
    single = (await client.post(f"/v1/deliveries/{original}/replay", headers=team.h("owner"))).json()
    await conn.execute("UPDATE webhook_delivery SET status = 'failed' WHERE id = $1", single["delivery_id"])
    got = (await client.post(URL, headers=team.h("owner"), json={"status": ["failed"]})).json()
    assert got["matched"] == 2
    links = dict(await conn.fetch("SELECT id::text, replayed_from_delivery_id::text FROM webhook_delivery "
                                  "WHERE id = ANY($1::uuid[])", got["delivery_ids"]))
    assert sorted(links.values()) == sorted([original, single["delivery_id"]])


async def test_replayed_deliveries_become_runs_that_reach_a_real_agent(
    wctx: Any, agent_server: AgentServer,  # noqa: F811
) -> None:
    w = await factories.world(wctx)
    agent = await factories.http_agent(w, url=agent_server.url("a"), name="a")
    ap = await factories.autopilot(w, agent.row["id"])
    trigger, _ = await factories.webhook_trigger(w, ap, rate_limit_per_minute=100000)
    async with wctx.pool.acquire() as conn:
        originals = [(await add_delivery(conn, ap, trigger, payload={"n": n}, admit=False))[0] for n in range(3)]
        await conn.execute("UPDATE webhook_delivery SET status = 'failed'")
    app = create_app(wctx)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hooks.test") as http:
            got = await http.post(URL, headers=bearer(w.api_key), json={"trigger_id": str(trigger["id"]),
                                                                       "status": ["failed"]})
    finally:
        await shutdown(app)
    assert got.status_code == 200 and got.json()["replayed"] == 3
    pusher = Pusher(wctx, holder="t1")
    assert await DeliveryWorker(wctx, holder="t1", pusher=pusher).run_once() == 3
    await pusher.stop(deadline=10)
    assert sorted(h.body["payload"]["payload"]["n"] for h in agent_server.of("a")) == [0, 1, 2]
    rows = await wctx.pool.fetch(
        """SELECT d.replayed_from_delivery_id, d.status, r.status AS run_status,
                  r.webhook_delivery_id = d.id AS linked
           FROM webhook_delivery d JOIN autopilot_run r ON r.id = d.run_id WHERE d.id = ANY($1::uuid[])""",
        got.json()["delivery_ids"])
    assert sorted(r["replayed_from_delivery_id"] for r in rows) == sorted(originals)
    assert {(r["status"], r["run_status"], r["linked"]) for r in rows} == {("dispatched", "completed", True)}
