"""Concurrency never surfaces as a 5xx: replays racing the delivery workers, and real deadlocks at the edge.

The deadlocks here are real: two PostgreSQL sessions lock two rows in opposite order. The other session
never runs the deadlock check (``deadlock_timeout`` 60 s), so the request's transaction is always the one
PostgreSQL aborts with 40P01.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from gateway import errors, overload
from gateway.admin.openapi import Call, Endpoint
from gateway.app import create_app, shutdown
from hookgate.context import open_context
from tests import databases, factories
from tests.conftest import make_settings
from tests.gateway import ingress_kit as kit
from tests.worker.conftest import FAST, AgentServer, add_delivery, agent_server, wait_for  # noqa: F401
from worker.deliveries import DeliveryWorker
from worker.push import Pusher

REPLAYS = 200


async def _deadlocks(db_url: str) -> int:
    """Deadlocks PostgreSQL counted in this database (a backend reports its count when idle or at exit)."""
    return int(await databases.fetchval(db_url, "SELECT deadlocks FROM pg_stat_database "
                                                "WHERE datname = current_database()"))


async def _original(conn: Any, trigger: Any) -> Any:
    """A delivery as ingress stores it, already dispatched."""
    return await factories.delivery(
        conn, trigger, body=json.dumps({"n": 1}).encode(), content_type="application/json", event="push",
        envelope={"event": "push", "payload": {"n": 1}, "request": {}}, signature_status="valid",
        status="dispatched")


def _transport(app: Any) -> httpx.ASGITransport:
    """Over ASGI, answering as a server would: an unhandled error is the 500 a client gets, not a raise."""
    return httpx.ASGITransport(app=app, raise_app_exceptions=False)


async def test_replays_racing_the_delivery_workers_never_deadlock_nor_answer_5xx(
    db_url: str, agent_server: AgentServer, caplog: pytest.LogCaptureFixture,  # noqa: F811
) -> None:
    before = await _deadlocks(db_url)
    statuses: list[int] = []
    async with open_context(make_settings(db_url, pool_max_size=20, **FAST), migrate=False) as ctx:
        w = await factories.world(ctx)
        agent = await factories.http_agent(w, url=agent_server.url("a"), name="a", max_concurrency=50)
        ap = await factories.autopilot(w, agent.row["id"])
        trigger, _ = await factories.webhook_trigger(w, ap, rate_limit_per_minute=100000)
        async with ctx.pool.acquire() as conn:
            latest = [await _original(conn, trigger)]
        pushers = [Pusher(ctx, holder=f"w{i}") for i in range(2)]
        workers = [DeliveryWorker(ctx, holder=f"w{i}", pusher=p) for i, p in enumerate(pushers)]
        roles = [asyncio.create_task(r.run()) for r in [*pushers, *workers]]
        app = create_app(ctx)
        gate = asyncio.Semaphore(4)

        async def replay(http: httpx.AsyncClient) -> None:
            async with gate:
                # The newest delivery: still queued, so a worker is taking it right now.
                got = await http.post(f"/v1/deliveries/{latest[-1]}/replay", headers=w.auth)
                statuses.append(got.status_code)
                if got.status_code == 201:
                    latest.append(got.json()["delivery_id"])

        try:
            async with httpx.AsyncClient(transport=_transport(app), base_url="http://hooks.test") as http:
                with caplog.at_level(logging.WARNING):
                    await asyncio.gather(*(replay(http) for _ in range(REPLAYS)))
                    await asyncio.sleep(0.5)
        finally:
            for role in [*workers, *pushers]:
                await role.stop()
            await asyncio.wait_for(asyncio.gather(*roles), 20)
            await shutdown(app)
        async with ctx.pool.acquire() as conn:
            made = await conn.fetchval("SELECT count(*) FROM webhook_delivery "
                                       "WHERE replayed_from_delivery_id IS NOT NULL")
    await asyncio.sleep(0.5)  # the closed sessions have reported their statistics
    assert [s for s in statuses if s != 201] == []
    assert made == REPLAYS
    assert not [r for r in caplog.records if "deadlock" in str(r.__dict__).lower()]
    assert await _deadlocks(db_url) - before == 0


@dataclass
class Cycle:
    """A handler locking row 1 then row 2 of ``race`` in its request's transaction, one step at a time.

    After locking row 1 it reports the attempt on ``holding`` and waits for a ``turns`` token before row 2,
    so the other session is already waiting for row 1 when the cycle closes.
    """

    holding: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    turns: asyncio.Queue[None] = field(default_factory=asyncio.Queue)
    runs: int = 0

    async def handler(self, call: Call) -> dict[str, Any]:
        async def write() -> dict[str, Any]:
            self.runs += 1
            await call.conn.execute("UPDATE race SET n = n + 1 WHERE id = 1")
            self.holding.put_nowait(self.runs)
            await self.turns.get()
            await call.conn.execute("UPDATE race SET n = n + 1 WHERE id = 2")
            return {"runs": self.runs}

        return await call.once(write)


@pytest.fixture
async def race(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    """The ``race`` table (rows 1 and 2) and the other session, which never runs the deadlock check."""
    other = await asyncpg.connect(db_url)
    await other.execute("CREATE TABLE race (id integer PRIMARY KEY, n integer NOT NULL)")
    await other.execute("INSERT INTO race VALUES (1, 0), (2, 0)")
    await other.execute("SET deadlock_timeout = '60s'")
    try:
        yield other
    finally:
        await other.close()


async def _close_cycles(db_url: str, other: asyncpg.Connection, cycle: Cycle, rounds: int) -> None:
    """Hold row 2; ``rounds`` times, wait for the handler to hold row 1 and ask for row 1 too: a deadlock.

    The handler's transaction is aborted (40P01) and row 1 is ours; it is given back (rollback to a savepoint)
    for the retry. Then the transaction commits, having changed nothing, and the handler may go on.
    """
    pid = other.get_server_pid()
    await other.execute("BEGIN")
    await other.execute("SELECT 1 FROM race WHERE id = 2 FOR UPDATE")
    for _ in range(rounds):
        await cycle.holding.get()
        await other.execute("SAVEPOINT cycle")
        blocked = asyncio.create_task(other.execute("SELECT 1 FROM race WHERE id = 1 FOR UPDATE"))
        await _until_waiting(db_url, pid)
        cycle.turns.put_nowait(None)  # the handler asks for row 2: the cycle is closed
        await asyncio.wait_for(blocked, 10)
        await other.execute("ROLLBACK TO SAVEPOINT cycle")
    await other.execute("COMMIT")
    for _ in range(overload.CONFLICT_ATTEMPTS):
        cycle.turns.put_nowait(None)


async def _until_waiting(db_url: str, pid: int) -> None:
    """Until session ``pid`` waits for a lock."""
    watch = await asyncpg.connect(db_url)
    try:
        query = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1"
        await wait_for(lambda: watch.fetchval(query, pid), timeout=10, every=0.01)
    finally:
        await watch.close()


async def _quick_deadlock_check(db_url: str) -> None:
    """Sessions of this database run the deadlock check after 100 ms of waiting (the server's default: 1 s)."""
    admin = await asyncpg.connect(db_url)
    try:
        await admin.execute("DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET deadlock_timeout = %L', "
                            "current_database(), '100ms'); END $$")
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def _edge(db_url: str, cycle: Cycle) -> AsyncIterator[tuple[httpx.AsyncClient, factories.World]]:
    """An app with one admin endpoint running ``cycle.handler``, behind the real wrapper and error handlers."""
    await _quick_deadlock_check(db_url)
    async with open_context(make_settings(db_url), migrate=False) as ctx:
        w = await factories.world(ctx)
        endpoint = Endpoint("POST", "/v1/race", cycle.handler, "race", "tests", None, idempotent=True)
        app = Starlette(routes=[endpoint.route()], exception_handlers={**overload.HANDLERS, **errors.HANDLERS})
        app.state.ctx = ctx
        async with httpx.AsyncClient(transport=_transport(app), base_url="http://hooks.test") as http:
            yield http, w


def _lost(caplog: pytest.LogCaptureFixture) -> list[str]:
    """SQLSTATEs of the conflicts the edge retried."""
    return [r.sqlstate for r in caplog.records if r.getMessage().startswith("transaction lost a conflict")]


async def test_a_request_that_loses_a_real_deadlock_is_retried_whole_and_succeeds(
    db_url: str, race: asyncpg.Connection, caplog: pytest.LogCaptureFixture,
) -> None:
    cycle = Cycle()
    with caplog.at_level(logging.INFO):
        async with _edge(db_url, cycle) as (http, w):
            headers = w.auth | {"Idempotency-Key": "race-1"}
            answer, _ = await asyncio.wait_for(asyncio.gather(
                http.post("/v1/race", headers=headers, json={}), _close_cycles(db_url, race, cycle, rounds=1)), 30)
            again = await http.post("/v1/race", headers=headers, json={})
    assert (answer.status_code, answer.json()) == (200, {"runs": 2})
    assert _lost(caplog) == ["40P01"]
    # The lost attempt was rolled back whole: each row was changed once, by the attempt that committed.
    assert [r["n"] for r in await race.fetch("SELECT n FROM race ORDER BY id")] == [1, 1]
    # The Idempotency-Key claim was rolled back with it, then held: the same key replays the stored answer.
    assert (again.status_code, again.json(), cycle.runs) == (200, {"runs": 2}, 2)


async def test_a_request_that_keeps_losing_deadlocks_gets_503_busy_with_retry_after_never_500(
    db_url: str, race: asyncpg.Connection, caplog: pytest.LogCaptureFixture,
) -> None:
    cycle = Cycle()
    with caplog.at_level(logging.INFO):
        async with _edge(db_url, cycle) as (http, w):
            answer, _ = await asyncio.wait_for(asyncio.gather(
                http.post("/v1/race", headers=w.auth, json={}),
                _close_cycles(db_url, race, cycle, rounds=overload.CONFLICT_ATTEMPTS)), 30)
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == str(overload.BUSY_RETRY_AFTER_S)
    assert answer.json() == {"error": "busy", "message": "the request conflicted with concurrent ones; retry shortly"}
    assert cycle.runs == overload.CONFLICT_ATTEMPTS
    assert _lost(caplog) == ["40P01"] * (overload.CONFLICT_ATTEMPTS - 1)
    assert [r["n"] for r in await race.fetch("SELECT n FROM race ORDER BY id")] == [0, 0]


@dataclass
class Conflicts:
    """A handler whose first ``losses`` runs lose a serialization conflict (SQLSTATE 40001, raised by PostgreSQL).

    PostgreSQL raises it here on demand (``RAISE … USING ERRCODE``): the driver and the edge see exactly what
    a REPEATABLE READ or SERIALIZABLE transaction that lost a conflict gets.
    """

    losses: int
    runs: int = 0

    async def handler(self, call: Call) -> dict[str, Any]:
        async def write() -> dict[str, Any]:
            self.runs += 1
            await call.conn.execute("UPDATE race SET n = n + 1 WHERE id = 1")
            if self.runs <= self.losses:
                await call.conn.execute("DO $$ BEGIN RAISE EXCEPTION 'could not serialize access due to concurrent "
                                        "update' USING ERRCODE = 'serialization_failure'; END $$")
            return {"runs": self.runs}

        return await call.once(write)


@pytest.mark.parametrize("losses", [overload.CONFLICT_ATTEMPTS - 1, overload.CONFLICT_ATTEMPTS])
async def test_serialization_failures_are_retried_like_deadlocks_then_503_busy(
    db_url: str, race: asyncpg.Connection, caplog: pytest.LogCaptureFixture, losses: int,
) -> None:
    conflicts = Conflicts(losses)
    with caplog.at_level(logging.INFO):
        async with _edge(db_url, conflicts) as (http, w):  # type: ignore[arg-type]
            answer = await asyncio.wait_for(http.post("/v1/race", headers=w.auth, json={}), 30)
    assert _lost(caplog) == ["40001"] * min(losses, overload.CONFLICT_ATTEMPTS - 1)
    n = (await race.fetchval("SELECT n FROM race WHERE id = 1"))
    if losses < overload.CONFLICT_ATTEMPTS:
        assert (answer.status_code, answer.json(), n) == (200, {"runs": losses + 1}, 1)
    else:
        assert answer.status_code == 503 and answer.json()["error"] == "busy", answer.text
        assert answer.headers["retry-after"] == str(overload.BUSY_RETRY_AFTER_S)
        assert (conflicts.runs, n) == (overload.CONFLICT_ATTEMPTS, 0)


async def _waiting_pid(db_url: str, besides: int) -> int:
    """The session of this database, other than ``besides``, that waits for a lock."""
    watch = await asyncpg.connect(db_url)
    query = """SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> $1
               AND wait_event_type = 'Lock'"""
    try:
        await wait_for(lambda: watch.fetchval(query, besides), timeout=10, every=0.01)
        return int(await watch.fetchval(query, besides))
    finally:
        await watch.close()


async def test_ingress_that_loses_a_real_deadlock_retries_and_admits_the_run(
    db_url: str, race: asyncpg.Connection, caplog: pytest.LogCaptureFixture,
) -> None:
    other = race
    async with kit.app_client(db_url) as (ctx, http):
        h = await kit.hook(ctx)
        raw, headers = kit.github({"action": "opened"}, delivery="gh-race-1")
        # The other session holds the trigger; ingress inserts the delivery (its dedupe key) and waits for the
        # trigger (the foreign key); the other session then inserts the same dedupe key: a deadlock ingress loses.
        await other.execute("BEGIN")
        await other.execute("SELECT 1 FROM autopilot_trigger WHERE id = $1 FOR UPDATE", h.trigger["id"])
        with caplog.at_level(logging.INFO):
            posted = asyncio.create_task(http.post(h.path, content=raw, headers=headers))
            await _waiting_pid(db_url, other.get_server_pid())
            await other.execute(
                """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, provider, event,
                                                 signature_status, dedupe_key)
                   VALUES ($1, $2, $3, 'github', 'github.issues.opened', 'valid', 'gh-race-1')""",
                h.w.workspace_id, h.trigger["id"], h.autopilot["id"])
            await other.execute("ROLLBACK")
            answer = await asyncio.wait_for(posted, 30)
        async with ctx.pool.acquire() as conn:
            [d] = await kit.deliveries(conn)
    assert answer.status_code == 200
    assert answer.json()["status"] == "accepted" and answer.json()["run_id"] is not None
    assert _lost(caplog) == ["40P01"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (d["dedupe_key"], str(d["run_id"])) == ("gh-race-1", answer.json()["run_id"])


async def test_a_delivery_worker_that_loses_a_real_deadlock_logs_a_warning_and_dispatches_on_a_later_pass(
    db_url: str, race: asyncpg.Connection, caplog: pytest.LogCaptureFixture,
) -> None:
    other = race
    async with open_context(make_settings(db_url, **FAST), migrate=False) as ctx:
        s = await factories.small(ctx, rate_limit_per_minute=100000)
        async with ctx.pool.acquire() as conn:
            delivery, _ = await add_delivery(conn, s.autopilot, s.trigger)
        # The worker locks the queued delivery, then checks the trigger's key (its first trigger_pace row),
        # which the other session holds; the other session then asks for the delivery's key: a deadlock.
        await other.execute("BEGIN")
        await other.execute("SELECT 1 FROM autopilot_trigger WHERE id = $1 FOR UPDATE", s.trigger["id"])
        worker = DeliveryWorker(ctx, holder="w")
        with caplog.at_level(logging.WARNING):
            running = asyncio.create_task(worker.run())
            try:
                await _waiting_pid(db_url, other.get_server_pid())
                await other.execute("SELECT 1 FROM webhook_delivery WHERE id = $1 FOR KEY SHARE", delivery)
                await other.execute("ROLLBACK")

                async def dispatched() -> bool:
                    status = await other.fetchval("SELECT status FROM webhook_delivery WHERE id = $1", delivery)
                    return bool(status == "dispatched")

                await wait_for(dispatched, timeout=20)
                assert not running.done()
            finally:
                await worker.stop()
                await asyncio.wait_for(running, 20)
    lost = [r for r in caplog.records if "deadlock detected" in str(getattr(r, "error", ""))]
    assert lost and all(r.levelno == logging.WARNING for r in lost)


def test_every_admin_runtime_and_dashboard_route_that_reads_the_database_retries_lost_conflicts() -> None:
    from gateway import admin, dashboard, runtime

    routes = [r for r in [*admin.routes, *runtime.routes, *dashboard.routes] if isinstance(r, Route)]
    plain = sorted(f"{min(r.methods or [])} {r.path}" for r in routes if not hasattr(r.endpoint, "__wrapped__"))
    assert len(routes) > 50
    # No database work behind these: a redirect, a static document, the login form, the logout redirect.
    assert plain == ["GET /", "GET /dashboard/login", "GET /openapi.json", "POST /dashboard/logout"]
