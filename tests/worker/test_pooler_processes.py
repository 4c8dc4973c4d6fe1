"""The real ``hookgate gateway`` and ``hookgate worker`` behind a real PgBouncer in transaction mode.

Their pools go through PgBouncer, their LISTEN and migrations straight to the server (``tests/pooler.py``).
"""

import asyncio

import httpx
from starlette.responses import JSONResponse

from tests.conftest import pooled_env
from tests.processes import wait_listeners
from tests.worker.conftest import agent_world, wait_for

# The fallback polls are far off: whatever moves within the test's time was woken by a notification.
ENV = {"HOOKGATE_WORKER_POLL_S": "30", "HOOKGATE_WATCHDOG_INTERVAL_S": "30", "HOOKGATE_LOG_LEVEL": "warning",
       "HOOKGATE_AGENT_MAX_CONCURRENCY": "2"}


async def test_webhooks_reach_a_real_agent_through_pgbouncer_woken_by_listen_and_held_to_the_agent_cap(
        ctx, conn, spawn, pgbouncer, db_url, agent_server):
    async def slow(_n, _hit):
        await asyncio.sleep(0.3)
        return JSONResponse({"ok": True})

    agent_server.behaviours["a"] = slow
    # Saved above HOOKGATE_AGENT_MAX_CONCURRENCY (an older row): the claims hold it to 2 all the same.
    token = (await agent_world(ctx, agent_server.url("a"), max_concurrency=8)).token
    env = ENV | pooled_env(pgbouncer, db_url)
    gateway = spawn.start("gateway", gateway=True, extra_env=env)
    worker = spawn.start("worker", extra_env=env)
    gateway.wait_ready()
    await wait_listeners(conn, 1, timeout=30)
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        answers = await asyncio.gather(*(
            http.post(f"/hooks/{token}", json={"n": n}, headers={"idempotency-key": f"evt-{n}"}) for n in range(6)))
    assert [a.json()["status"] for a in answers] == ["accepted"] * 6

    async def completed():
        return await conn.fetchval("SELECT count(*) FROM autopilot_run WHERE status = 'completed'") == 6

    await wait_for(completed, timeout=15, every=0.1)
    assert len(agent_server.of("a")) == 6
    assert agent_server.peak["a"] == 2
    for proc in (gateway, worker):
        out = proc.output()
        assert "prepared statement" not in out and "polling only" not in out, out
        assert '"level": "error"' not in out and "Traceback" not in out, out
