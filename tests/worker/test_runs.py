import time

from autopilot import admission
from sql import Q
from tests import factories
from tests.worker.conftest import add_delivery, bulk_deliveries
from worker.runs import REPAIR_SWEEP_S, RunWorker


async def test_pending_runs_without_a_delivery_are_dispatched_once(wctx):
    s = await factories.small(wctx, mode="create_issue")
    async with wctx.pool.acquire() as conn:
        adm = await admission.admit(conn, autopilot_id=s.autopilot["id"], source="manual", payload={},
                                    clicker_id=s.world.owner_id, heartbeat_timeout_s=120.0)
    worker = RunWorker(wctx, holder="t")
    assert await worker.run_once() == 1
    assert await worker.run_once() == 0
    async with wctx.pool.acquire() as conn:
        run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", adm.run_id)
        assert run["status"] == "queued" and run["issue_id"] and run["task_id"]


async def _half_made(wctx):
    """A half-made webhook run and a clock past the repair delay (60 s).

    Its delivery says dispatched, but the run never got its task (a crash between the two).
    """
    s = await factories.small(wctx)
    async with wctx.pool.acquire() as conn:
        delivery_id, run_id = await add_delivery(conn, s.autopilot, s.trigger)
        await conn.execute("UPDATE webhook_delivery SET status = 'dispatched' WHERE id = $1", delivery_id)
        return run_id, await conn.fetchval("SELECT now() + interval '61 s'")


async def _tasks_of(wctx, run_id):
    async with wctx.pool.acquire() as conn:
        return await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id)


async def test_a_stale_half_made_webhook_run_is_repaired_after_the_repair_delay(wctx):
    run_id, later = await _half_made(wctx)
    worker = RunWorker(wctx, holder="t")
    assert await worker.run_once() == 0
    worker.swept_at = None  # the next pass sweeps again (at most every REPAIR_SWEEP_S otherwise)
    assert await worker.run_once(now=later) == 1
    assert await _tasks_of(wctx, run_id) == 1


async def test_a_webhook_run_whose_delivery_still_waits_is_left_to_the_delivery_path(wctx):
    # A delivery held back by its trigger's pacing (or a backed-up queue) keeps its run pending for longer than
    # the repair delay: the delivery path owns that run. Repairing it would push it past the trigger's pacing.
    s = await factories.small(wctx, rate_limit_per_minute=1)
    async with wctx.pool.acquire() as conn:
        delivery_id, run_id = await add_delivery(conn, s.autopilot, s.trigger)
        await conn.execute("UPDATE webhook_delivery SET available_at = now() + interval '10 min', reason_code = 'paced'"
                           " WHERE id = $1", delivery_id)
        later = await conn.fetchval("SELECT now() + interval '61 s'")
    worker = RunWorker(wctx, holder="t")
    assert await worker.run_once(now=later) == 0
    async with wctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 0
        assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "pending"
        # Once its delivery is no longer queued (dispatched by a crashed worker without the task), it is repaired.
        await conn.execute("UPDATE webhook_delivery SET status = 'dispatched' WHERE id = $1", delivery_id)
    worker.swept_at = None
    assert await worker.run_once(now=later) == 1
    async with wctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 1


async def test_the_sweep_for_half_made_runs_runs_at_most_every_repair_sweep_s(wctx):
    run_id, later = await _half_made(wctx)
    worker = RunWorker(wctx, holder="t")
    worker.swept_at = time.monotonic()  # swept just now: a pass dispatches runs without a delivery only
    assert await worker.run_once(now=later) == 0
    worker.swept_at = time.monotonic() - REPAIR_SWEEP_S
    assert await worker.run_once(now=later) == 1
    assert await _tasks_of(wctx, run_id) == 1


async def test_a_run_without_a_delivery_is_claimed_without_reading_the_pending_webhook_runs(wctx):
    # A backlog of webhook runs waiting for their deliveries' turn is the delivery path's: the runs loop's claim
    # of a manual, api or schedule run reads its own index, not each of those runs once per claim (it did: ~7 ms
    # per claim at 20,000, paid again for every schedule-fired run behind them).
    s = await factories.small(wctx)
    async with wctx.pool.acquire() as conn:
        await bulk_deliveries(conn, s.autopilot, s.trigger, 10000)
        await conn.execute("ANALYZE autopilot_run")
        adm = await admission.admit(conn, autopilot_id=s.autopilot["id"], source="manual", payload={},
                                    clicker_id=s.world.owner_id, heartbeat_timeout_s=120.0)
        query = Q.run_claim_undispatched.strip().rstrip(";")
        async with conn.transaction():
            [plan] = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query)
            assert await conn.fetchval(query) == adm.run_id
    # Reading the pending webhook runs is ~300 buffers (their table, or an index of them); its own index, a few.
    blocks = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
    assert blocks < 30, plan
