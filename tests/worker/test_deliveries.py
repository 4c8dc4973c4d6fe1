import asyncio
import contextlib
import uuid

from hookgate.context import open_context
from hookgate.notify import NotifyListener
from tests import factories
from tests.conftest import make_settings
from tests.worker.conftest import FAST, add_delivery
from worker.deliveries import DeliveryWorker, Takers
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


@contextlib.asynccontextmanager
async def _listening_workers(ctx, names):
    """Delivery workers ``names``, each with its own listener (connected first) and pusher, running until the end.

    Yields the workers and their run tasks.
    """
    wakes = [NotifyListener(ctx.dsn) for _ in names]
    for wake in wakes:
        await wake.ensure()
    pushers = [Pusher(ctx, holder=name, wake=wake) for name, wake in zip(names, wakes, strict=True)]
    workers = [DeliveryWorker(ctx, holder=name, pusher=pusher, wake=wake)
               for name, pusher, wake in zip(names, pushers, wakes, strict=True)]
    runners = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield workers, runners
    finally:
        for worker, runner, pusher, wake in zip(workers, runners, pushers, wakes, strict=True):
            if not runner.done():
                await worker.stop()
                await asyncio.wait_for(runner, 5)
            await pusher.stop(deadline=5)
            await wake.stop()


async def _announce_and_wait(ctx, s, holders, count):
    """Add ``count`` deliveries one at a time, each announced by name as ingress does; the holder of each task."""
    found = []
    async with ctx.pool.acquire() as conn:
        for _ in range(count):
            delivery, run_id = await add_delivery(conn, s.autopilot, s.trigger)
            await conn.execute("SELECT pg_notify('hookgate_deliveries', $1::text)", str(delivery))
            for _ in range(500):
                holder = await conn.fetchval("SELECT holder_instance FROM agent_task WHERE run_id = $1", run_id)
                if holder is not None:
                    break
                await asyncio.sleep(0.01)
            assert holder in holders, f"delivery {delivery} was not dispatched by a worker in 5 s"
            found.append((delivery, holder))
    return found


def test_each_announced_delivery_falls_to_two_listening_workers_or_to_a_lone_one():
    ids = [uuid.uuid4() for _ in range(200)]
    assert all(Takers(0, 1).owns(i) for i in ids)
    assert all(Takers(0, 2).owns(i) and Takers(1, 2).owns(i) for i in ids)
    for count in (3, 5):
        owners = [[rank for rank in range(count) if Takers(rank, count).owns(i)] for i in ids]
        assert all(len(o) == 2 for o in owners)
        assert {rank for o in owners for rank in o} == set(range(count))  # every worker gets a share


async def _sharing(workers, count):
    """Until every worker has read ``count`` listening workers (each reads them at its first walk)."""
    for _ in range(100):
        if all(w.takers.count == count for w in workers):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the workers read {[w.takers for w in workers]}, not {count} listening")


async def test_listening_workers_share_announced_deliveries_each_taken_by_one_of_its_two(db_url, agent_server):
    # A walk of the queue only every 30 s: each announced delivery is taken by name, by a worker it falls to.
    async with open_context(make_settings(db_url, **{**FAST, "worker_poll_s": 30.0}), migrate=False) as ctx:
        s = await factories.small(ctx, agent_url=agent_server.url("a"), rate_limit_per_minute=100000)
        async with _listening_workers(ctx, ["w1", "w2", "w3"]) as (workers, _):
            await _sharing(workers, 3)
            listening = sorted(w.wake.server_pid for w in workers)
            assert [w.takers.rank for w in workers] == [listening.index(w.wake.server_pid) for w in workers]
            taken = await _announce_and_wait(ctx, s, {"w1", "w2", "w3"}, 30)
    owner = {w.holder: w.takers for w in workers}
    assert all(owner[holder].owns(delivery) for delivery, holder in taken)
    assert all(sum(t.owns(delivery) for t in owner.values()) == 2 for delivery, _ in taken)


async def test_workers_left_take_every_announced_delivery_when_one_goes(db_url, agent_server):
    async with open_context(make_settings(db_url, **{**FAST, "worker_poll_s": 0.2}), migrate=False) as ctx:
        s = await factories.small(ctx, agent_url=agent_server.url("a"), rate_limit_per_minute=100000)
        async with _listening_workers(ctx, ["w1", "w2", "w3"]) as ((first, second, third), (_, stopping, _)):
            await _sharing([first, second, third], 3)
            await second.stop()  # its listening session closes: the others find two at their next read
            await asyncio.wait_for(stopping, 5)
            await second.wake.stop()
            taken = await _announce_and_wait(ctx, s, {"w1", "w3"}, 12)
            await _sharing([first, third], 2)
    assert {first.takers.rank, third.takers.rank} == {0, 1}
    assert {holder for _, holder in taken} <= {"w1", "w3"}
