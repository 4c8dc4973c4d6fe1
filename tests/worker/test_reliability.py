"""Dispatch that outlives an agent's outage: the retry schedule, agent health (the circuit breaker), attempts.

Real local agents (tests/worker/conftest.py), the real delivery and push loops with their LISTEN connection.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from starlette.responses import JSONResponse, Response

from autopilot import tasks
from hookgate.context import open_context
from hookgate.notify import NotifyListener
from tests.conftest import make_settings
from tests.worker.conftest import UNPACED, AgentServer, add_delivery, agent_world, answer, bulk_deliveries, wait_for
from worker.deliveries import DeliveryWorker
from worker.push import Attempt, Outcome, Pusher, PushWorker, classify

#: A schedule that gives up after ~1.4 s (4 attempts), a breaker that trips after 3 failures and probes every
#: 0.3 s, doubling up to 1 s: an outage of many seconds outlives the schedule by far.
OUTAGE = {"worker_poll_s": 0.1, "push_retry_schedule": "0.2,0.4,0.8", "agent_trip_after": 3,
          "agent_probe_min_s": 0.3, "agent_probe_max_s": 1.0, "delivery_backoff_base_s": 0.01,
          "delivery_backoff_cap_s": 0.05}


@asynccontextmanager
async def _worker(ctx: Any) -> AsyncIterator[Pusher]:
    """A worker's delivery and push loops with its LISTEN connection, running until the block ends."""
    wake = NotifyListener(ctx.dsn)
    await wake.ensure()
    pusher = Pusher(ctx, holder="w1", wake=wake)
    services = [DeliveryWorker(ctx, holder="w1", pusher=pusher, wake=wake),
                PushWorker(ctx, holder="w1", pusher=pusher, wake=wake)]
    loops = [asyncio.create_task(s.run()) for s in services]
    try:
        yield pusher
    finally:
        for service in services:
            await service.stop()
        await asyncio.gather(*loops, return_exceptions=True)
        await pusher.stop(deadline=5)
        await wake.close()


class Outage:
    """An agent that answers 503 while ``down``, then 200; records the time of every request."""

    def __init__(self) -> None:
        self.down = True
        self.at: list[tuple[float, bool]] = []

    async def __call__(self, _n: int, _hit: Any) -> Response:
        self.at.append((time.monotonic(), self.down))
        if self.down:
            return Response(status_code=503)
        return JSONResponse({"ok": True})


async def _one_agent(ctx: Any, agent_server: AgentServer, schedule: list[float] | None = None,
                     **agent_kw: Any) -> tuple[Any, Any, Any]:
    """A workspace with HTTP agent "a" on the test server (its own retry schedule, if given), an autopilot.

    The autopilot is assigned to it and has one unpaced webhook trigger. Returns ``(agent id, autopilot, trigger)``.
    """
    s = await agent_world(ctx, agent_server.url("a"), name="a", trigger=UNPACED, **agent_kw)
    if schedule is not None:
        await ctx.pool.execute("UPDATE agent SET retry_schedule = $2 WHERE id = $1", s.agent.row["id"], schedule)
    return s.agent.row["id"], s.autopilot, s.trigger


async def test_an_agent_down_for_14_s_loses_nothing_its_circuit_opens_and_closes_and_the_backlog_completes_once(
        db_url: str, agent_server: AgentServer) -> None:
    outage = Outage()
    agent_server.behaviours["a"] = outage
    async with open_context(make_settings(db_url, **OUTAGE), migrate=False) as ctx:
        agent_id, ap, trigger = await _one_agent(ctx, agent_server, max_concurrency=4)
        async with ctx.pool.acquire() as conn:
            await bulk_deliveries(conn, ap, trigger, 20)
        async with _worker(ctx):
            async def tripped() -> bool:
                state = await ctx.pool.fetchval("SELECT state FROM agent_health WHERE agent_id = $1", agent_id)
                return bool(state == "unhealthy")

            await wait_for(tripped, timeout=10)
            opened = time.monotonic()
            await asyncio.sleep(14.0)  # far longer than the schedule (1.4 s) and several probe intervals
            during = await ctx.pool.fetch("SELECT status, attempt, max_attempts FROM agent_task WHERE agent_id = $1",
                                          agent_id)
            runs_during = await ctx.pool.fetch("SELECT status, count(*) FROM autopilot_run WHERE autopilot_id = $1 "
                                               "GROUP BY status", ap["id"])
            outage.down = False
            back = time.monotonic()

            async def drained() -> bool:
                return await ctx.pool.fetchval("SELECT count(*) FROM autopilot_run WHERE autopilot_id = $1 "
                                               "AND status = 'completed'", ap["id"]) == 20

            await wait_for(drained, timeout=30)
            drain_s = time.monotonic() - back
        health = await ctx.pool.fetchrow("SELECT * FROM agent_health WHERE agent_id = $1", agent_id)
        tasks = await ctx.pool.fetch("SELECT id, status, attempt FROM agent_task WHERE agent_id = $1", agent_id)
        attempts = await ctx.pool.fetch("SELECT task_id, outcome, http_status FROM task_attempt WHERE agent_id = $1",
                                        agent_id)
    # While the agent was down nothing failed for good and no task spent more attempts than its schedule has.
    assert len(during) == 20 and all(t["status"] in ("queued", "running") for t in during)
    assert all(t["attempt"] < t["max_attempts"] for t in during)
    assert {r["status"] for r in runs_during} <= {"queued", "running"}
    # The open circuit let only probes through: far fewer requests than 14 s of retries of 20 tasks would be.
    probes = [t for t, down in outage.at if down and t > opened]
    assert 4 <= len(probes) <= 14 / 0.3 + 2, len(probes)
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert min(gaps) > 0.2 and max(gaps) < 1.0 * 1.1 + 0.5
    # Back: every run completed, each task pushed successfully exactly once, the circuit closed.
    assert drain_s < 10
    assert len(tasks) == 20 and {t["status"] for t in tasks} == {"succeeded"}
    succeeded = [a["task_id"] for a in attempts if a["outcome"] == "succeeded"]
    assert sorted(succeeded) == sorted(t["id"] for t in tasks)
    assert sum(1 for _, down in outage.at if not down) == 20
    assert {a["http_status"] for a in attempts if a["outcome"] == "failed"} == {503}
    assert len(attempts) == len(outage.at)
    assert (health["state"], health["failures"], health["next_probe_at"]) == ("healthy", 0, None)


async def test_without_an_outage_the_schedule_runs_out_and_the_task_fails_with_every_attempt_kept(
        db_url: str, agent_server: AgentServer) -> None:
    agent_server.behaviours["a"] = answer(
        JSONResponse({"why": "x" * 5000}, status_code=500, headers={"set-cookie": "s=1", "x-request-id": "r"}))
    settings = OUTAGE | {"push_retry_schedule": "0.05,0.05", "agent_trip_after": 100}
    async with open_context(make_settings(db_url, **settings), migrate=False) as ctx:
        agent_id, ap, trigger = await _one_agent(ctx, agent_server)
        async with ctx.pool.acquire() as conn:
            _, run_id = await add_delivery(conn, ap, trigger)
        async with _worker(ctx):
            async def failed() -> bool:
                return await ctx.pool.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "failed"

            await wait_for(failed, timeout=10)
        task = await ctx.pool.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", run_id)
        attempts = await ctx.pool.fetch("SELECT * FROM task_attempt WHERE task_id = $1 ORDER BY id", task["id"])
        health = await ctx.pool.fetch("SELECT state, failures FROM agent_health WHERE agent_id = $1", agent_id)
    assert (task["status"], task["attempt"], task["max_attempts"]) == ("failed", 3, 3)
    assert [(a["attempt"], a["outcome"], a["http_status"]) for a in attempts] == [(n, "failed", 500) for n in (1, 2, 3)]
    first = attempts[0]
    kept = first["response_headers"]
    assert kept["content-type"] == "application/json" and kept["x-request-id"] == "r" and "set-cookie" not in kept
    assert set(kept) <= {"content-type", "content-length", "date", "server", "x-request-id"}
    assert len(first["response_body"]) == 4096 and first["response_body"].startswith('{"why":"xxx')
    assert first["finished_at"] >= first["started_at"] and first["duration_ms"] >= 0
    assert first["error"] == "agent answered 500"
    assert [(h["state"], h["failures"]) for h in health] == [("healthy", 3)]


async def test_an_agents_own_schedule_sets_its_attempts_and_retry_after_is_honoured_up_to_a_day(
        db_url: str, agent_server: AgentServer) -> None:
    agent_server.behaviours["a"] = answer(Response(status_code=503, headers={"retry-after": str(3 * 86400)}))
    async with open_context(make_settings(db_url, **OUTAGE), migrate=False) as ctx:
        _, ap, trigger = await _one_agent(ctx, agent_server, [60, 600])
        async with ctx.pool.acquire() as conn:
            _, run_id = await add_delivery(conn, ap, trigger)
        async with _worker(ctx):
            async def waiting() -> bool:
                task = await ctx.pool.fetchrow("SELECT status, attempt FROM agent_task WHERE run_id = $1", run_id)
                return task is not None and (task["status"], task["attempt"]) == ("queued", 1)

            await wait_for(waiting, timeout=10)
        task = await ctx.pool.fetchrow("SELECT *, available_at - now() AS wait FROM agent_task WHERE run_id = $1",
                                       run_id)
        run = await ctx.pool.fetchrow("SELECT status FROM autopilot_run WHERE id = $1", run_id)
    assert task["max_attempts"] == 3  # two delays of its own
    assert 86400 - 5 < task["wait"].total_seconds() <= 86400  # three days asked, one day at most
    assert task["error"] == "agent answered 503" and run["status"] == "queued"


async def test_a_failed_probe_gives_its_attempt_back_and_the_next_probe_waits_longer(
        db_url: str, agent_server: AgentServer) -> None:
    outage = Outage()
    agent_server.behaviours["a"] = outage
    settings = OUTAGE | {"agent_trip_after": 1, "agent_probe_min_s": 0.5, "agent_probe_max_s": 4.0}
    async with open_context(make_settings(db_url, **settings), migrate=False) as ctx:
        agent_id, ap, trigger = await _one_agent(ctx, agent_server)
        async with ctx.pool.acquire() as conn:
            _, run_id = await add_delivery(conn, ap, trigger)
        async with _worker(ctx):
            await wait_for(lambda: len(outage.at) >= 3, timeout=10)  # probed twice
        task = await ctx.pool.fetchrow("SELECT status, attempt FROM agent_task WHERE run_id = $1", run_id)
        health = await ctx.pool.fetchrow("SELECT * FROM agent_health WHERE agent_id = $1", agent_id)
    # The first failure tripped the breaker (and, the agent being unhealthy then, was given back too).
    assert task["status"] in ("queued", "running") and task["attempt"] <= 1
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(outage.at)]
    assert gaps[0] >= 0.45 and gaps[1] >= 0.9  # 0.5 s after the trip, then 1 s
    assert health["state"] == "unhealthy" and health["probe_interval_s"] >= 1.0
    assert isinstance(health["next_probe_at"], datetime)


async def test_a_retry_follows_its_agents_own_schedule_even_when_a_success_in_the_same_flush_reset_its_count(
        db_url: str, agent_server: AgentServer) -> None:
    async with open_context(make_settings(db_url, **OUTAGE), migrate=False) as ctx:
        agent_id, ap, trigger = await _one_agent(ctx, agent_server, [1000])
        async with ctx.pool.acquire() as conn:
            for _ in range(2):
                await add_delivery(conn, ap, trigger)
        pusher = Pusher(ctx, holder="w1")
        assert await DeliveryWorker(ctx, holder="w1").run_once() == 2  # no pusher: both tasks wait queued
        async with ctx.pool.acquire() as conn:
            first, second = await tasks.claim(conn, agent_id=agent_id, lease_s=60, holder="w1",
                                              actor_type="worker", limit=2)
        took = Attempt(datetime.now(UTC), datetime.now(UTC), 1)
        flushed = [asyncio.create_task(pusher._record(first, Outcome("retry", "agent answered 503", "failed"), took)),
                   asyncio.create_task(pusher._record(second, classify(200, {}, b"{}"), took))]
        await asyncio.gather(*flushed)  # one group: the failure, then a success that resets the count
        waited = await ctx.pool.fetchval("SELECT available_at - now() FROM agent_task WHERE id = $1", first.id)
    assert 900 < waited.total_seconds() <= 1100  # the agent's 1000 s, not the default 0.2 s
