import asyncio
import uuid

from tests import factories
from tests.worker.conftest import add_delivery
from worker.deliveries import DeliveryWorker
from worker.push import Pusher


async def _delivery(conn, delivery_id):
    return await conn.fetchrow("SELECT * FROM webhook_delivery WHERE id = $1", delivery_id)


async def test_admitted_delivery_becomes_a_dispatched_run_with_one_task(wctx):
    s = await factories.small(wctx, rate_limit_per_minute=1000)
    async with wctx.pool.acquire() as conn:
        delivery_id, run_id = await add_delivery(conn, s.autopilot, s.trigger)
    worker = DeliveryWorker(wctx, holder="t")
    assert await worker.run_once() == 1
    assert await worker.run_once() == 0
    async with wctx.pool.acquire() as conn:
        d = await _delivery(conn, delivery_id)
        run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
        task = await conn.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", run_id)
    assert d["status"] == "dispatched" and d["run_id"] == run_id and d["lease_token"] is None
    assert d["dispatch_attempts"] == 0
    assert run["status"] == "queued" and run["task_id"] == task["id"]
    assert task["status"] == "queued" and task["idempotency_key"] == f"run:{run_id}:1"
    assert task["agent_id"] == s.agent.row["id"]


async def test_crash_window_delivery_is_admitted_by_the_worker(wctx):
    s = await factories.small(wctx)
    async with wctx.pool.acquire() as conn:
        delivery_id, _ = await add_delivery(conn, s.autopilot, s.trigger, admit=False)
    await DeliveryWorker(wctx, holder="t").run_once()
    async with wctx.pool.acquire() as conn:
        d = await _delivery(conn, delivery_id)
        run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE webhook_delivery_id = $1", delivery_id)
    assert d["status"] == "dispatched" and d["run_id"] == run["id"]
    assert run["source"] == "webhook" and run["status"] == "queued"


async def test_crash_window_rechecks_the_gate_but_an_admitted_run_survives_a_pause(wctx):
    s = await factories.small(wctx, event_filters=["github.push*"])
    async with wctx.pool.acquire() as conn:
        filtered, _ = await add_delivery(conn, s.autopilot, s.trigger, event="github.issues", admit=False)
        admitted, run_id = await add_delivery(conn, s.autopilot, s.trigger, event="github.push")
        unadmitted, _ = await add_delivery(conn, s.autopilot, s.trigger, event="github.push", admit=False)
        await conn.execute("UPDATE autopilot SET status = 'paused' WHERE id = $1", s.autopilot["id"])
    await DeliveryWorker(wctx, holder="t").run_once()
    async with wctx.pool.acquire() as conn:
        rows = {d: await _delivery(conn, d) for d in (filtered, admitted, unadmitted)}
        run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
    assert (rows[filtered]["status"], rows[filtered]["reason_code"]) == ("ignored", "autopilot_paused")
    assert (rows[unadmitted]["status"], rows[unadmitted]["reason_code"]) == ("ignored", "autopilot_paused")
    assert rows[admitted]["status"] == "dispatched" and run["status"] == "queued"


async def test_crash_window_applies_the_payload_filter_and_stores_the_deciding_node(wctx):
    s = await factories.small(wctx)
    async with wctx.pool.acquire() as conn:
        await conn.execute("UPDATE autopilot_trigger SET payload_filter = $2 WHERE id = $1", s.trigger["id"],
                           {"path": "/amount", "gte": 100})
        small, _ = await add_delivery(conn, s.autopilot, s.trigger, payload={"amount": 5}, admit=False)
        large, _ = await add_delivery(conn, s.autopilot, s.trigger, payload={"amount": 500}, admit=False)
    await DeliveryWorker(wctx, holder="t").run_once()
    async with wctx.pool.acquire() as conn:
        rows = {d: await _delivery(conn, d) for d in (small, large)}
    assert (rows[small]["status"], rows[small]["reason_code"]) == ("ignored", "payload_filter")
    assert rows[small]["reason"] == "the payload filter does not match: /amount is 5, not at least 100"
    assert rows[large]["status"] == "dispatched"


async def test_pacing_defers_over_budget_deliveries_without_spending_an_attempt(wctx):
    s = await factories.small(wctx, rate_limit_per_minute=2)
    async with wctx.pool.acquire() as conn:
        for _ in range(5):
            await add_delivery(conn, s.autopilot, s.trigger)
    assert await DeliveryWorker(wctx, holder="t").run_once() == 2
    async with wctx.pool.acquire() as conn:
        rows = await conn.fetch("SELECT status, dispatch_attempts, available_at > now() + interval '50 s' AS later,"
                                " lease_token FROM webhook_delivery")
    assert sorted(r["status"] for r in rows) == ["dispatched"] * 2 + ["queued"] * 3
    deferred = [r for r in rows if r["status"] == "queued"]
    assert all(r["later"] and r["dispatch_attempts"] == 0 and r["lease_token"] is None for r in deferred)


async def test_failed_dispatch_backs_off_and_fails_after_max_attempts(wctx):
    s = await factories.small(wctx)
    async with wctx.pool.acquire() as conn:
        delivery_id, _ = await add_delivery(conn, s.autopilot, s.trigger, admit=False)
        # A run id that does not exist: dispatch fails every time.
        await conn.execute("UPDATE webhook_delivery SET run_id = $2 WHERE id = $1", delivery_id, uuid.uuid4())
    worker = DeliveryWorker(wctx, holder="t")
    for attempt in range(1, 6):
        await conn_wait_due(wctx, delivery_id)
        assert await worker.run_once() == 1
        async with wctx.pool.acquire() as conn:
            d = await _delivery(conn, delivery_id)
        assert d["dispatch_attempts"] == attempt
    assert d["status"] == "failed" and d["reason_code"] == "dispatch_failed"


async def conn_wait_due(ctx, delivery_id):
    async with ctx.pool.acquire() as conn:
        await conn.execute("UPDATE webhook_delivery SET available_at = now() WHERE id = $1", delivery_id)


async def test_a_stale_lease_write_is_refused(wctx):
    s = await factories.small(wctx)
    async with wctx.pool.acquire() as conn:  # crash window: leased by the take
        delivery_id, _ = await add_delivery(conn, s.autopilot, s.trigger, admit=False)
    first = DeliveryWorker(wctx, holder="a")
    [leased] = (await first.take_batch()).leased
    async with wctx.pool.acquire() as conn:  # the lease expires: another worker may claim it
        await conn.execute("UPDATE webhook_delivery SET available_at = now() WHERE id = $1", delivery_id)
    second = DeliveryWorker(wctx, holder="b")
    [again] = (await second.take_batch()).leased
    assert again.lease_token != leased.lease_token
    assert await first.process(leased) == "lost"
    assert await second.process(again) == "dispatched"
    async with wctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM agent_task") == 1


async def test_running_worker_wakes_on_notify_and_stop_releases_buffered_leases(wctx, agent_server):
    s = await factories.small(wctx, agent_url=agent_server.url("a"), rate_limit_per_minute=100000)
    from hookgate.notify import NotifyListener

    wake = NotifyListener(wctx.dsn)
    pusher = Pusher(wctx, holder="t", wake=wake)
    worker = DeliveryWorker(wctx, holder="t", pusher=pusher, wake=wake)
    runner = asyncio.create_task(worker.run())
    await wake.ensure()
    async with wctx.pool.acquire() as conn:
        _, run_id = await add_delivery(conn, s.autopilot, s.trigger)
        await conn.execute("SELECT pg_notify('hookgate_deliveries', 'x')")
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not agent_server.of("a"):
        await asyncio.sleep(0.005)
    assert loop.time() - start < 0.5
    await worker.stop()
    await asyncio.wait_for(runner, 5)
    await pusher.stop(deadline=5)
    await wake.close()
    async with wctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "completed"
        assert await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE lease_token IS NOT NULL") == 0
