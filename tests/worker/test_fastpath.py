"""The set-based fast path: a leased batch dispatched in one statement, push successes written in one."""

import asyncio
from datetime import timedelta

from autopilot import dispatch
from tests import factories
from tests.worker.conftest import add_delivery
from worker import fastpath, watchdog
from worker.deliveries import DeliveryWorker
from worker.push import Pusher


async def _count(conn, sql, *args):
    return await conn.fetchval(sql, *args)


async def test_batch_dispatches_plain_pending_runs_within_the_cap_and_leaves_the_rest(wctx, agent_server):
    w = await factories.world(wctx)
    agent = await factories.http_agent(w, url=agent_server.url("a"), name="a", max_concurrency=2)
    plain = await factories.autopilot(w, agent.row["id"], title="plain")
    with_issue = await factories.autopilot(w, agent.row["id"], mode="create_issue", title="issue")
    t_plain, _ = await factories.webhook_trigger(w, plain, rate_limit_per_minute=100000)
    t_issue, _ = await factories.webhook_trigger(w, with_issue, rate_limit_per_minute=100000)
    async with wctx.pool.acquire() as conn:
        fast = [await add_delivery(conn, plain, t_plain) for _ in range(3)]
        unusual = [await add_delivery(conn, with_issue, t_issue), await add_delivery(conn, plain, t_plain, admit=False)]
    worker = DeliveryWorker(wctx, holder="t1")
    batch = await worker.claim_batch(limit=10)
    assert len(batch) == 5
    options = dispatch.Options(claim=dispatch.ClaimFor("t1"), heartbeat_timeout_s=120.0)
    async with wctx.pool.acquire() as conn:
        done = await fastpath.dispatch_pending(conn, batch, options, capacity=10)
        again = await fastpath.dispatch_pending(conn, batch, options, capacity=10)
        fast_runs = [run for _, run in fast]
        per_run = await conn.fetch("SELECT run_id, count(*) AS n, min(status) AS status FROM agent_task "
                                   "WHERE run_id = ANY($1) GROUP BY run_id", fast_runs)
        run_status = sorted(await conn.fetch("SELECT status FROM autopilot_run WHERE id = ANY($1)", fast_runs))
        claims = await _count(conn, "SELECT count(*) FROM audit_log WHERE action = 'CLAIM'")
        left = await conn.fetch("SELECT status, lease_token FROM webhook_delivery WHERE id = ANY($1)",
                                [d for d, _ in unusual])
    assert done.done == {d for d, _ in fast} and again.done == set() and again.claimed == []
    assert len(done.claimed) == 2 and all(c.lease_token is not None for c in done.claimed)  # the agent's cap
    assert sorted(r["n"] for r in per_run) == [1, 1, 1]  # one task per run attempt
    assert sorted(r["status"] for r in per_run) == ["queued", "running", "running"]
    assert [r["status"] for r in run_status] == ["queued", "running", "running"]
    assert claims == 2
    tokens = {d["id"]: d["lease_token"] for d in batch}
    assert all(r["status"] == "queued" and r["lease_token"] in tokens.values() for r in left)
    rest = [d for d in batch if d["id"] not in done.done]
    assert await worker.process_many(rest) == ["dispatched", "dispatched"]
    async with wctx.pool.acquire() as conn:
        issued = await conn.fetchrow("SELECT issue_id, task_id FROM autopilot_run WHERE id = $1", unusual[0][1])
    assert issued["issue_id"] is not None and issued["task_id"] is not None

    pusher = Pusher(wctx, holder="t1")
    assert await asyncio.gather(*(pusher.push(c) for c in done.claimed)) == ["done", "done"]
    await pusher.stop(deadline=5)
    async with wctx.pool.acquire() as conn:
        ids = [c.id for c in done.claimed]
        finished = await conn.fetch("SELECT t.status, r.status AS run FROM agent_task t "
                                    "JOIN autopilot_run r ON r.id = t.run_id WHERE t.id = ANY($1)", ids)
        releases = await _count(conn, "SELECT count(*) FROM audit_log WHERE action = 'RELEASE' "
                                "AND subject_id = ANY($1)", [str(i) for i in ids])
    assert {(r["status"], r["run"]) for r in finished} == {("succeeded", "completed")} and releases == 2


async def test_a_push_success_after_the_lease_was_lost_is_recorded_not_applied(wctx, agent_server):
    w = await factories.world(wctx)
    agent = await factories.http_agent(w, url=agent_server.url("a"), name="a")
    ap = await factories.autopilot(w, agent.row["id"])
    trigger, _ = await factories.webhook_trigger(w, ap, rate_limit_per_minute=100000)
    async with wctx.pool.acquire() as conn:
        _, run_id = await add_delivery(conn, ap, trigger)
    batch = await DeliveryWorker(wctx, holder="t1").claim_batch()
    async with wctx.pool.acquire() as conn:
        options = dispatch.Options(claim=dispatch.ClaimFor("t1"), heartbeat_timeout_s=120.0)
        done = await fastpath.dispatch_pending(conn, batch, options, 1)
        [claimed] = done.claimed
        later = await conn.fetchval("SELECT now() + interval '1 hour'")
        await watchdog.sweep(conn, now=later - timedelta(minutes=1), heartbeat_timeout_s=120.0)
    pusher = Pusher(wctx, holder="t1")
    assert await pusher.push(claimed) == "done"
    await pusher.stop(deadline=5)
    async with wctx.pool.acquire() as conn:
        task = await conn.fetchrow("SELECT status FROM agent_task WHERE id = $1", claimed.id)
        run = await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id)
        late = await _count(conn, "SELECT count(*) FROM audit_log WHERE action = 'LATE_RESULT' AND subject_id = $1",
                            str(claimed.id))
    assert task["status"] == "queued" and run != "completed" and late == 1
