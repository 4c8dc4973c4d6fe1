"""Editing an agent (PATCH) and rotating its signing secret: validation, the concurrency cap, the pushes.

The cap is checked with real claims against the database; pushes go to a real local HTTP agent and are
verified with the ``standardwebhooks`` reference library.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any
from uuid import UUID

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from autopilot import agents, tasks
from tests import factories
from tests.gateway.admin.conftest import agent_body, create_agent, hookgate
from tests.worker.conftest import add_delivery, agent_server, wctx  # noqa: F401  (fixtures)
from worker.deliveries import DeliveryWorker
from worker.push import Pusher, PushWorker


async def _audit(conn, action: str, agent_id: str) -> list[Any]:
    return list(await conn.fetch("SELECT * FROM audit_log WHERE action = $1 AND subject_id = $2 ORDER BY id",
                                 action, agent_id))


# --- PATCH ----------------------------------------------------------------------------------------------------


async def test_patch_changes_the_given_fields_only_and_audits_them(world, client, conn):
    agent = await create_agent(client, world, agent_body(max_concurrency=2))
    r = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth,
                           json={"name": "renamed", "url": "http://127.0.0.1:10/new", "timeout_s": 30})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["name"] == "renamed" and out["runtime"]["url"] == "http://127.0.0.1:10/new"
    assert out["runtime"]["timeout_s"] == 30 and out["max_concurrency"] == 2
    assert out["runtime"]["secret_hint"] == agent["runtime"]["secret_hint"]
    assert "signing_secret" not in out
    assert (await client.get(f"/v1/agents/{agent['id']}", headers=world.auth)).json() == out
    [entry] = await _audit(conn, "AGENT_UPDATE", agent["id"])
    detail = entry["detail"] if isinstance(entry["detail"], dict) else json.loads(entry["detail"])
    assert sorted(detail["changed"]) == ["name", "timeout_s", "url"]
    assert agent["signing_secret"] not in json.dumps(detail)


async def test_patch_url_goes_through_the_egress_policy(world, client, conn):
    agent = await create_agent(client, world, agent_body())
    for url, code in (("http://169.254.169.254/latest/meta-data/", "agent_url_forbidden"),
                      ("http://user:pw@127.0.0.1:9/agent", "agent_url_forbidden"),
                      ("http://no-such-host.invalid/agent", "agent_url_unresolvable")):
        r = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth, json={"url": url})
        assert r.status_code == 422 and r.json()["error"] == code, (url, r.text)
    row = await conn.fetchrow("SELECT endpoint_url FROM agent WHERE id = $1", agent["id"])
    assert row["endpoint_url"] == "http://127.0.0.1:9/agent"
    assert await _audit(conn, "AGENT_UPDATE", agent["id"]) == []


async def test_patch_refuses_bad_values_like_create(world, client):
    agent = await create_agent(client, world, agent_body())
    for body in ({"max_concurrency": 0}, {"max_concurrency": 10001}, {"timeout_s": 0}, {"timeout_s": 301},
                 {"name": ""}, {"name": None}, {"url": "ftp://x"}, {"url": None}, {"runtime_kind": "pull"},
                 {"visibility": "public"}):
        r = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth, json=body)
        assert r.status_code == 422, (body, r.text)
        assert {"error", "message"} <= set(r.json())


async def test_patch_of_a_pull_agent_refuses_url_and_timeout(world, client):
    agent = await create_agent(client, world, {"name": "puller", "runtime": {"kind": "pull"}})
    for body in ({"url": "http://127.0.0.1:9/agent"}, {"timeout_s": 5}):
        r = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth, json=body)
        assert r.status_code == 422 and r.json()["error"] == "not_an_http_agent", r.text
    r = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth,
                           json={"name": "p2", "max_concurrency": 7, "visibility": "private"})
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["max_concurrency"], r.json()["visibility"]) == ("p2", 7, "private")


async def test_patch_unknown_agent_is_404(world, client):
    r = await client.patch("/v1/agents/00000000-0000-7000-8000-000000000000", headers=world.auth,
                           json={"name": "x"})
    assert r.status_code == 404


# --- the concurrency cap across changes, with real claims -----------------------------------------------------


#: A pull agent's body for ``POST /v1/agents`` (the cap tests add ``max_concurrency``).
PULL = {"name": "p", "runtime": {"kind": "pull"}}


async def _queue(conn, w, agent_id, n: int) -> None:
    for _ in range(n):
        await conn.execute(
            "INSERT INTO agent_task (workspace_id, agent_id, idempotency_key) VALUES ($1, $2, gen_random_uuid()::text)",
            w.workspace_id, agent_id)


async def _claim(ctx, agent_id, limit: int = 100) -> list[tasks.Claimed]:
    async with ctx.pool.acquire() as c:
        return await tasks.claim(c, agent_id=agent_id, lease_s=60, holder="t", actor_type="runtime", limit=limit)


async def _finish(ctx, claimed: tasks.Claimed | Any) -> None:
    async with ctx.pool.acquire() as c:
        await tasks.report(c, claimed.id if isinstance(claimed, tasks.Claimed) else claimed["id"],
                           claimed.lease_token if isinstance(claimed, tasks.Claimed) else claimed["lease_token"],
                           tasks.Report("succeeded"), actor_type="runtime", actor_id="t")


async def _running(conn, agent_id) -> int:
    return int(await conn.fetchval(
        "SELECT count(*) FROM agent_task WHERE agent_id = $1 AND status = 'running'", agent_id))


async def _set_cap(client, w, agent_id, cap: int) -> None:
    r = await client.patch(f"/v1/agents/{agent_id}", headers=w.auth, json={"max_concurrency": cap})
    assert r.status_code == 200 and r.json()["max_concurrency"] == cap, r.text


async def _slots(conn, agent_id) -> list[int]:
    return [r["slot"] for r in await conn.fetch("SELECT slot FROM agent_slot WHERE agent_id = $1 ORDER BY slot",
                                                agent_id)]


async def test_growing_the_cap_lets_more_tasks_run_at_once(ctx, client, conn, world):
    agent = await create_agent(client, world, PULL | {"max_concurrency": 1})
    await _queue(conn, world, agent["id"], 6)
    assert len(await _claim(ctx, agent["id"])) == 1
    await _set_cap(client, world, agent["id"], 4)
    assert await _slots(conn, agent["id"]) == [0, 1, 2, 3]
    assert len(await _claim(ctx, agent["id"])) == 3
    assert await _running(conn, agent["id"]) == 4
    assert await _claim(ctx, agent["id"]) == []


async def test_shrinking_the_cap_keeps_running_tasks_but_claims_never_exceed_the_new_cap(ctx, client, conn):
    # One slot rule (hookgate_slots_take) serves every claim, the take's tasks born claimed included.
    claim = _claim
    w = await factories.world(ctx)
    agent = await create_agent(client, w, PULL | {"max_concurrency": 4})
    await _queue(conn, w, agent["id"], 20)
    first = await _claim(ctx, agent["id"])
    assert len(first) == 4
    await _set_cap(client, w, agent["id"], 2)
    # Nothing was cut: the four still run, and none of them lost its lease.
    assert await _running(conn, agent["id"]) == 4
    assert await claim(ctx, agent["id"]) == []
    # Whichever slots the finished tasks held, nothing new starts while 2 or more still run.
    await _finish(ctx, first[0])
    assert await claim(ctx, agent["id"]) == []
    await _finish(ctx, first[1])
    assert await claim(ctx, agent["id"]) == []
    await _finish(ctx, first[3])
    assert len(await claim(ctx, agent["id"])) == 1
    assert await _running(conn, agent["id"]) == 2
    await _finish(ctx, first[2])
    assert len(await claim(ctx, agent["id"])) == 1
    assert await _running(conn, agent["id"]) == 2 and await claim(ctx, agent["id"]) == []


async def test_shrinking_with_free_slots_leaves_exactly_the_room_of_the_new_cap(ctx, client, conn, world):
    agent = await create_agent(client, world, PULL | {"max_concurrency": 8})
    await _queue(conn, world, agent["id"], 30)
    first = await _claim(ctx, agent["id"])
    for c in first[:6]:
        await _finish(ctx, c)
    await _set_cap(client, world, agent["id"], 3)
    assert await _running(conn, agent["id"]) == 2
    assert len(await _claim(ctx, agent["id"])) == 1
    assert await _running(conn, agent["id"]) == 3 and await _claim(ctx, agent["id"]) == []
    assert max(await _slots(conn, agent["id"])) < 8


async def test_concurrent_claimers_after_a_shrink_stay_within_the_cap(ctx, client, conn, world):
    agent = await create_agent(client, world, PULL | {"max_concurrency": 10})
    await _queue(conn, world, agent["id"], 60)
    first = await _claim(ctx, agent["id"])
    assert len(first) == 10
    await _set_cap(client, world, agent["id"], 3)
    for c in first[:8]:
        await _finish(ctx, c)
    got = await asyncio.gather(*(_claim(ctx, agent["id"], 2) for _ in range(8)))
    assert sum(len(g) for g in got) == 1
    assert await _running(conn, agent["id"]) == 3


async def test_shrink_then_grow_restores_every_slot(ctx, client, conn, world):
    agent = await create_agent(client, world, PULL | {"max_concurrency": 4})
    await _queue(conn, world, agent["id"], 10)
    first = await _claim(ctx, agent["id"])
    await _set_cap(client, world, agent["id"], 1)
    for c in first:
        await _finish(ctx, c)
    await _set_cap(client, world, agent["id"], 5)
    assert len(await _claim(ctx, agent["id"])) == 5
    assert await _slots(conn, agent["id"]) == [0, 1, 2, 3, 4]


# --- rotate-secret --------------------------------------------------------------------------------------------


async def test_rotate_secret_answers_a_new_secret_once_and_keeps_the_old_one_sealed(ctx, client, conn, world):
    agent = await create_agent(client, world, agent_body())
    r = await client.post(f"/v1/agents/{agent['id']}/rotate-secret", headers=world.auth)
    assert r.status_code == 200, r.text
    out = r.json()
    assert set(out) == {"signing_secret", "previous_expires_at"}
    new = out["signing_secret"]
    assert new.startswith("whsec_") and new != agent["signing_secret"]
    window = await conn.fetchval("SELECT $1::timestamptz - now()", datetime.fromisoformat(out["previous_expires_at"]))
    assert 23.9 * 3600 < window.total_seconds() <= 24 * 3600
    row = await conn.fetchrow("SELECT * FROM agent WHERE id = $1", agent["id"])
    assert agent["signing_secret"].encode() not in bytes(row["previous_secret_ct"])
    context = agents.secret_context(row["id"])
    assert ctx.keyring.decrypt(bytes(row["previous_secret_ct"]), context) == agent["signing_secret"]
    assert ctx.keyring.decrypt(bytes(row["signing_secret_ct"]), context) == new
    shown = (await client.get(f"/v1/agents/{agent['id']}", headers=world.auth)).json()
    assert shown["runtime"]["secret_hint"] == new[-4:] and new not in json.dumps(shown)
    [entry] = await _audit(conn, "AGENT_SECRET_ROTATE", agent["id"])
    assert new not in json.dumps(dict(entry), default=str)
    assert agent["signing_secret"] not in json.dumps(dict(entry), default=str)


async def test_rotate_secret_of_a_pull_agent_is_refused(world, client):
    agent = await create_agent(client, world, {"name": "puller", "runtime": {"kind": "pull"}})
    r = await client.post(f"/v1/agents/{agent['id']}/rotate-secret", headers=world.auth)
    assert r.status_code == 409 and r.json()["error"] == "not_an_http_agent"


async def test_a_second_rotation_drops_the_first_secret(ctx, client, conn, world):
    agent = await create_agent(client, world, agent_body())
    first = (await client.post(f"/v1/agents/{agent['id']}/rotate-secret", headers=world.auth)).json()
    second = (await client.post(f"/v1/agents/{agent['id']}/rotate-secret", headers=world.auth)).json()
    row = await conn.fetchrow("SELECT * FROM agent WHERE id = $1", agent["id"])
    context = agents.secret_context(row["id"])
    assert ctx.keyring.decrypt(bytes(row["previous_secret_ct"]), context) == first["signing_secret"]
    assert ctx.keyring.decrypt(bytes(row["signing_secret_ct"]), context) == second["signing_secret"]


def _verifies(secret: str, hit: Any) -> bool:
    try:
        Webhook(secret).verify(hit.raw, hit.headers)
    except WebhookVerificationError:
        return False
    return True


async def _expire_previous(conn, agent_id: str) -> None:
    await conn.execute("UPDATE agent SET previous_secret_expires_at = now() - interval '1 second' WHERE id = $1",
                       agent_id)


async def _push_fast_path(context, ap, trigger) -> None:
    async with context.pool.acquire() as c:
        await add_delivery(c, ap, trigger)
    pusher = Pusher(context, holder="t1")
    assert await DeliveryWorker(context, holder="t1", pusher=pusher).run_once() == 1
    await pusher.stop(deadline=10)


async def _push_queued(context, w, agent_id) -> None:
    async with context.pool.acquire() as c:
        await _queue(c, w, agent_id, 1)
    pusher = Pusher(context, holder="t1")
    assert await PushWorker(context, holder="t1", pusher=pusher).run_once() == 1
    await pusher.stop(deadline=10)


async def test_during_the_rotation_window_pushes_verify_with_both_secrets_then_only_the_new(
        wctx, client, agent_server):  # noqa: F811
    w = await factories.world(wctx)
    old = await factories.http_agent(w, url=agent_server.url("a"), name="a")
    agent_id = str(old.row["id"])
    ap = await factories.autopilot(w, old.row["id"])
    trigger, _ = await factories.webhook_trigger(w, ap, rate_limit_per_minute=100000)
    r = await client.post(f"/v1/agents/{agent_id}/rotate-secret", headers=w.auth)
    assert r.status_code == 200, r.text
    new = r.json()["signing_secret"]

    await _push_fast_path(wctx, ap, trigger)
    await _push_queued(wctx, w, agent_id)
    for hit in agent_server.of("a"):
        assert len(hit.headers["webhook-signature"].split(" ")) == 2
        assert _verifies(old.signing_secret, hit) and _verifies(new, hit)

    async with wctx.pool.acquire() as c:
        await _expire_previous(c, agent_id)
    agent_server.hits.clear()
    await _push_fast_path(wctx, ap, trigger)
    await _push_queued(wctx, w, agent_id)
    assert len(agent_server.of("a")) == 2
    for hit in agent_server.of("a"):
        assert len(hit.headers["webhook-signature"].split(" ")) == 1
        assert _verifies(new, hit) and not _verifies(old.signing_secret, hit)


# --- CLI ------------------------------------------------------------------------------------------------------


async def test_cli_gets_updates_and_rotates_an_agent(world, live_url, capsys, monkeypatch):
    monkeypatch.setenv("HOOKGATE_URL", live_url)
    monkeypatch.setenv("HOOKGATE_API_KEY", world.api_key)
    code, out, _ = await hookgate(capsys, "agents", "create", "--name", "bot", "--endpoint",
                                  "http://127.0.0.1:9/x", "--json")
    agent = json.loads(out)
    code, out, _ = await hookgate(capsys, "agents", "update", agent["id"], "--name", "bot2", "--endpoint",
                                  "http://127.0.0.1:10/y", "--timeout", "20", "--max-concurrency", "6",
                                  "--private", "--json")
    updated = json.loads(out)
    assert code == 0 and updated["name"] == "bot2" and updated["runtime"]["url"] == "http://127.0.0.1:10/y"
    assert updated["runtime"]["timeout_s"] == 20 and updated["max_concurrency"] == 6
    assert updated["visibility"] == "private"
    code, out, _ = await hookgate(capsys, "agents", "get", agent["id"])
    assert code == 0 and "bot2" in out and "http://127.0.0.1:10/y" in out
    code, out, _ = await hookgate(capsys, "agents", "rotate-secret", agent["id"], "--json")
    assert code == 0 and json.loads(out)["signing_secret"].startswith("whsec_")
    code, _, err = await hookgate(capsys, "agents", "update", agent["id"], "--endpoint",
                                  "http://169.254.169.254/x")
    assert code == 1 and "agent_url_forbidden" in err


async def test_both_endpoints_are_in_the_openapi_document(client):
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert "patch" in paths["/v1/agents/{agent_id}"]
    assert "post" in paths["/v1/agents/{agent_id}/rotate-secret"]


# --- HOOKGATE_AGENT_MAX_CONCURRENCY ---------------------------------------------------------------------------


async def test_max_concurrency_above_the_gateways_bound_is_refused_naming_the_setting(ctx, client, conn,
                                                                                      world):
    cap = ctx.settings.agent_max_concurrency
    over = await client.post("/v1/agents", headers=world.auth, json=agent_body(max_concurrency=cap + 1))
    assert over.status_code == 422 and over.json()["error"] == "max_concurrency_too_high"
    assert "HOOKGATE_AGENT_MAX_CONCURRENCY" in over.json()["message"]
    assert await conn.fetchval("SELECT count(*) FROM agent WHERE workspace_id = $1", world.workspace_id) == 0
    agent = await create_agent(client, world, agent_body(max_concurrency=cap))
    r = await client.patch(f"/v1/agents/{agent['id']}", headers=world.auth, json={"max_concurrency": cap + 1})
    assert r.status_code == 422 and r.json()["error"] == "max_concurrency_too_high"
    assert "HOOKGATE_AGENT_MAX_CONCURRENCY" in r.json()["message"]
    assert await conn.fetchval("SELECT max_concurrency FROM agent WHERE id = $1", UUID(agent["id"])) == cap


async def test_an_agent_above_the_bound_is_held_to_it_when_claiming(ctx, conn, world):
    agent = await factories.pull_agent(world, max_concurrency=ctx.settings.agent_max_concurrency)
    await conn.execute("UPDATE agent SET max_concurrency = 10000 WHERE id = $1", agent.row["id"])  # an older row
    await conn.execute(
        "INSERT INTO agent_task (workspace_id, agent_id, idempotency_key) "
        "SELECT $1, $2, gen_random_uuid()::text FROM generate_series(1, $3)",
        world.workspace_id, agent.row["id"], ctx.settings.agent_max_concurrency + 5)
    won = await tasks.claim(conn, agent_id=agent.row["id"], limit=1000, lease_s=60, holder="h", actor_type="runtime",
                            cap=ctx.settings.agent_max_concurrency)
    assert len(won) == ctx.settings.agent_max_concurrency
