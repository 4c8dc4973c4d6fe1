"""Fair share past the delivery claim: an agent's queue and a worker process's push slots.

An agent's queue is taken round-robin across its autopilots; a process's push slots are shared across workspaces
and agents. Real local agents, the real push loop and the real runtime API.
"""

import asyncio
import time

from starlette.responses import JSONResponse

from autopilot import admission, dispatch, tasks
from hookgate import database
from hookgate.context import open_context
from tests import factories
from tests.conftest import make_settings
from tests.plans import logged_plans
from tests.worker.conftest import FAST, UNPACED, add_delivery, agent_world, bulk_deliveries, push_loop, wait_for
from worker.deliveries import DeliveryWorker


async def _quick(_n, _hit):
    await asyncio.sleep(0.02)
    return JSONResponse({"ok": True})


async def _queued(ctx, ap, trigger, count):
    """``count`` runs of the autopilot dispatched with their tasks left queued (no pusher claims them)."""
    async with ctx.pool.acquire() as conn:
        if count == 1:
            await add_delivery(conn, ap, trigger)
        else:
            await bulk_deliveries(conn, ap, trigger, count)
    taken = await DeliveryWorker(ctx, holder="maker").take_batch(limit=count)
    assert taken.dispatched == count and taken.claimed == []


async def test_a_quiet_autopilots_task_reaches_the_agent_while_a_floods_backlog_waits(wctx, agent_server):
    agent_server.behaviours["a"] = _quick
    s = await agent_world(wctx, agent_server.url("a"), name="a", max_concurrency=2, autopilot={"title": "flood"},
                          trigger=UNPACED)
    flood_ap, flood = s.autopilot, s.trigger
    quiet_ap = await factories.autopilot(s.world, s.agent.row["id"], title="quiet")
    quiet, _ = await factories.webhook_trigger(s.world, quiet_ap, **UNPACED)
    await _queued(wctx, flood_ap, flood, 2000)
    await _queued(wctx, quiet_ap, quiet, 1)  # queued after the whole flood
    async with push_loop(wctx, deadline=0.2):
        started = time.monotonic()
        await wait_for(lambda: any(h.body["autopilot"]["id"] == str(quiet_ap["id"]) for h in agent_server.of("a")),
                       timeout=10)
        took = time.monotonic() - started
        flood_hits = len(agent_server.of("a")) - 1
    async with wctx.pool.acquire() as conn:
        waiting = await conn.fetchval("SELECT count(*) FROM agent_task WHERE autopilot_id = $1 AND status = 'queued'",
                                      flood_ap["id"])
    assert took < 2.0, f"the quiet autopilot's task waited {took:.2f} s"
    assert flood_hits <= 20 and waiting >= 1900  # most of the flood still waits
    assert agent_server.peak["a"] <= 2


async def test_a_hanging_workspace_leaves_another_workspaces_pushes_fast(db_url, agent_server):
    async def hang(_n, _hit):
        await asyncio.sleep(30)
        return JSONResponse({"ok": True})

    agent_server.behaviours["hang"] = hang
    agent_server.behaviours["fast"] = _quick
    settings = make_settings(db_url, **(FAST | {"push_inflight": 8}))
    async with open_context(settings, migrate=False) as ctx:
        hung = await agent_world(ctx, agent_server.url("hang"), workspace="hung", name="hang", timeout_s=60,
                                 max_concurrency=50, trigger=UNPACED)
        fast = await agent_world(ctx, agent_server.url("fast"), workspace="fast", name="fast", max_concurrency=50,
                                 trigger=UNPACED)
        await _queued(ctx, hung.autopilot, hung.trigger, 40)
        async with push_loop(ctx, deadline=0.2) as (pusher, _pushes, wake):
            deliveries = DeliveryWorker(ctx, holder="t1", pusher=pusher, wake=wake)
            # Alone, the hanging agent takes all but the headroom (one of eight slots) and hangs there.
            await wait_for(lambda: len(agent_server.of("hang")) == 7, timeout=5)
            await asyncio.sleep(0.3)
            assert len(agent_server.of("hang")) == 7
            # Another workspace's runs, through the take (born claimed) and the push loop (queued ones).
            async with ctx.pool.acquire() as conn:
                made = [time.monotonic()]
                await bulk_deliveries(conn, fast.autopilot, fast.trigger, 10)
            await deliveries.take_batch(limit=10)
            await wait_for(lambda: len(agent_server.of("fast")) == 10, timeout=5)
            took = time.monotonic() - made[0]
            await asyncio.sleep(0.3)  # what finished frees slots the hanging agent may not take: over its share
            hung_hits = len(agent_server.of("hang"))
    assert took < 1.0, f"10 pushes of 20 ms to the other workspace took {took:.2f} s"
    assert hung_hits == 7


async def test_pull_claims_interleave_the_autopilots_feeding_an_agent(ctx, conn, client):
    w = await factories.world(ctx)
    agent = await factories.pull_agent(w, max_concurrency=12)
    aps = {name: await factories.autopilot(w, agent.row["id"], mode="create_issue", title=name)
           for name in ("a", "b")}
    for name, n in (("a", 8), ("b", 3)):  # all of a's queued before any of b's
        for _ in range(n):
            await _api_run(conn, aps[name])
    seen = []
    for _ in range(11):
        r = await client.post("/v1/runtime/claim", json={"wait_s": 0},
                              headers={"Authorization": f"Bearer {agent.runtime_token}"})
        assert r.status_code == 200, r.text
        seen.append(r.json()["task"]["autopilot"]["title"])
    assert seen == ["a", "b", "a", "b", "a", "b", "a", "a", "a", "a", "a"]


async def _api_run(conn, ap):
    adm = await admission.admit(conn, autopilot_id=ap["id"], source="api", payload={}, heartbeat_timeout_s=120.0)
    await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0))


async def test_the_fair_claim_walks_its_index_after_its_plans_were_made_on_a_small_queue(wctx):
    # A worker connection's first claims run while the agent's queue is small and cache their plans for the
    # session; the walk over the autopilots must still read agent_task_fair_idx (one descent per autopilot) once
    # the queue is long, not every queued task of the agent (and every dead entry a drain left) once per probe.
    w = await factories.world(wctx)
    agent = await factories.http_agent(w, url="http://127.0.0.1:9/a", name="a", max_concurrency=64)
    ap = await factories.autopilot(w, agent.row["id"], title="a")
    agent_id, made = agent.row["id"], [0]

    async def queue(conn, count):
        await conn.execute("INSERT INTO agent_task (workspace_id, agent_id, idempotency_key, autopilot_id) "
                           "SELECT $1, $2, 'plan:' || ($3 + g), $4 FROM generate_series(1, $5) g",
                           w.workspace_id, agent_id, made[0], ap["id"], count)
        made[0] += count

    async def claim_and_finish(conn, limit):
        claimed = await tasks.claim(conn, agent_id=agent_id, limit=limit, lease_s=60, holder="t",
                                    actor_type="worker", cap=64)
        await conn.execute("UPDATE agent_task SET status = 'succeeded', lease_token = NULL, lease_expires_at = NULL "
                           "WHERE id = ANY($1::uuid[])", [c.id for c in claimed])

    conn = await database.connect(wctx.dsn)
    try:
        await conn.execute("ALTER TABLE agent_task SET (autovacuum_enabled = false)")  # no ANALYZE replans it
        await queue(conn, 20000)  # a drain went through the queue: dead entries in its partial indexes
        await conn.execute("UPDATE agent_task SET status = 'succeeded'")
        for _ in range(12):  # the claim's statements get their session plans while the queue is short
            await queue(conn, 3)
            await claim_and_finish(conn, 8)
        await queue(conn, 500)
        async with logged_plans(conn, "auto_explain.log_nested_statements = on") as plans:
            await claim_and_finish(conn, 8)
    finally:
        await conn.close()
    [walk] = [p for p in plans if "WITH RECURSIVE above" in p]
    assert "agent_task_fair_idx" in walk and "agent_task_queue_idx" not in walk, walk
