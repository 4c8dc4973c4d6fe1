"""Workers as separate OS processes (the real ``hookgate worker``) racing, crashing and stopping."""

import asyncio
import signal

from starlette.responses import JSONResponse, Response

from tests.processes import wait_listeners
from tests.worker.conftest import add_delivery, agent_world, bulk_deliveries, wait_for

ENV = {"HOOKGATE_WORKER_POLL_S": "0.2", "HOOKGATE_WATCHDOG_INTERVAL_S": "0.2",
       "HOOKGATE_PUSH_RETRY_SCHEDULE": "0.05,0.1,0.2,0.2", "HOOKGATE_LOG_LEVEL": "warning"}


async def test_three_worker_processes_race_over_thousands_of_deliveries(ctx, spawn, agent_server):
    total = 3000
    s = await agent_world(ctx, agent_server.url("a"), max_concurrency=64,
                          trigger={"rate_limit_per_minute": 1_000_000})
    for _ in range(3):
        spawn.start("worker", extra_env=ENV)
    async with ctx.pool.acquire() as conn:
        await wait_listeners(conn, 3, timeout=30)
        await bulk_deliveries(conn, s.autopilot, s.trigger, total)
        await conn.execute("SELECT pg_notify('hookgate_deliveries', 'bulk')")

        async def drained():
            return await conn.fetchval("SELECT count(*) FROM agent_task WHERE status = 'succeeded'") == total

        await wait_for(drained, timeout=90, every=0.2)
        tasks = await conn.fetch("SELECT id, run_id, attempt FROM agent_task")
        queued = await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE status <> 'dispatched'")
        runs = await conn.fetch("SELECT status, task_id FROM autopilot_run")
        releases = await conn.fetch("SELECT subject_id, count(*) AS n FROM audit_log WHERE action = 'RELEASE' "
                                    "AND detail->>'status' = 'succeeded' GROUP BY subject_id")
        holders = await conn.fetchval("SELECT count(DISTINCT actor_id) FROM audit_log WHERE action = 'CLAIM'")
    assert len(tasks) == total and len({t["run_id"] for t in tasks}) == total  # each run dispatched exactly once
    assert queued == 0
    assert {r["status"] for r in runs} == {"completed"} and all(r["task_id"] for r in runs)
    pushed = {h.headers["webhook-id"] for h in agent_server.of("a")}
    assert pushed == {str(t["id"]) for t in tasks}  # each task pushed at least once
    assert len(releases) == total and {r["n"] for r in releases} == {1}  # and completed once
    assert holders >= 2
    assert agent_server.peak["a"] <= 64


async def test_a_worker_killed_mid_lease_is_taken_over_after_the_lease(ctx, spawn, agent_server):
    never = asyncio.Event()

    async def hang_first(n, hit):
        if n == 0:
            await never.wait()
        return JSONResponse({"ok": True})

    agent_server.behaviours["a"] = hang_first
    # Push lease = agent timeout (capped to 1.5 s here) + 0.5 s margin = 2 s.
    s = await agent_world(ctx, agent_server.url("a"), timeout_s=1.5)
    env = ENV | {"HOOKGATE_PUSH_LEASE_MARGIN_S": "0.5", "HOOKGATE_PUSH_TIMEOUT_CAP_S": "30"}
    victim = spawn.start("worker", extra_env=env)
    async with ctx.pool.acquire() as conn:
        await wait_listeners(conn, 1, timeout=30)
        _delivery_id, run_id = await add_delivery(conn, s.autopilot, s.trigger)
        await conn.execute("SELECT pg_notify('hookgate_deliveries', 'x')")
        await wait_for(lambda: len(agent_server.of("a")) == 1)
        victim.signal(signal.SIGKILL)
        victim.wait()
        assert await conn.fetchval("SELECT status FROM agent_task WHERE run_id = $1", run_id) == "running"
        spawn.start("worker", extra_env=env)

        async def done():
            return await conn.fetchval("SELECT status FROM agent_task WHERE run_id = $1", run_id) == "succeeded"

        await wait_for(done, timeout=30)
        task = await conn.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", run_id)
        audit = [dict(r) for r in await conn.fetch(
            "SELECT action, detail FROM audit_log WHERE subject_id = $1 ORDER BY id", str(task["id"]))]
        run_status = await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id)
    never.set()
    hits = agent_server.of("a")
    assert [a["action"] for a in audit] == ["CLAIM", "EXPIRE", "CLAIM", "RELEASE"]
    assert audit[1]["detail"]["attempt"] == 1 and audit[2]["detail"]["attempt"] == 2
    assert task["attempt"] == 2 and run_status == "completed"
    assert len(hits) == 2 and hits[0].headers["webhook-id"] == hits[1].headers["webhook-id"] == str(task["id"])
    assert hits[1].body["attempt"] == 2


async def test_sigterm_stops_claiming_and_releases_a_hanging_push_within_the_deadline(ctx, spawn, agent_server):
    never = asyncio.Event()

    async def hang(n, hit):
        await never.wait()
        return Response(status_code=200)

    agent_server.behaviours["a"] = hang
    s = await agent_world(ctx, agent_server.url("a"), timeout_s=60)
    proc = spawn.start("worker", extra_env=ENV | {"HOOKGATE_SHUTDOWN_DEADLINE": "2"})
    async with ctx.pool.acquire() as conn:
        await wait_listeners(conn, 1, timeout=30)
        _, run_id = await add_delivery(conn, s.autopilot, s.trigger)
        await conn.execute("SELECT pg_notify('hookgate_deliveries', 'x')")
        await wait_for(lambda: len(agent_server.of("a")) == 1)
        loop = asyncio.get_running_loop()
        start = loop.time()
        proc.signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 10)
        elapsed = loop.time() - start
        task = await conn.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", run_id)
    never.set()
    assert code == 0 and elapsed < 4, proc.output()
    assert task["status"] == "queued" and task["lease_token"] is None
