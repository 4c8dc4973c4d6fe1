"""Hookgate behind a real PgBouncer in transaction mode (``tests/pooler.py``), in process.

The pool goes through PgBouncer (``HOOKGATE_DATABASE_URL``), what needs a real session straight to the server
(``HOOKGATE_DIRECT_DATABASE_URL``): LISTEN, migrations and their advisory lock. The pool uses no prepared
statement cache and no session setting. The role processes are in ``tests/worker/test_pooler_processes.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from gateway.app import create_app, shutdown
from hookgate import database, migrations
from hookgate.context import open_context
from hookgate.settings import ConfigError
from sql import Q
from tests import databases, factories
from tests.acceptance.test_cli import hookgate
from tests.conftest import TEST_SECRET_KEY, make_settings
from tests.pooler import PgBouncer


async def test_pgbouncer_is_detected_and_a_direct_server_is_not(db_url, pgbouncer):
    assert await database.detect_pooler(pgbouncer.url(db_url)) is True
    assert await database.detect_pooler(db_url) is False


async def test_a_pool_through_pgbouncer_shares_its_server_connections_without_prepared_statement_errors(
        db_url, pgbouncer):
    # 10 clients over few server connections, each running the same statements again and again: with asyncpg's
    # statement cache a statement prepared on one server connection is executed on another ("does not exist").
    settings = make_settings(pgbouncer.url(db_url), direct_database_url=db_url)
    async with open_context(settings, migrate=False) as ctx:
        assert ctx.pooler == "transaction" and ctx.direct_dsn == db_url and ctx.dsn == pgbouncer.url(db_url)
        w = await factories.world(ctx)

        async def client() -> set[int]:
            backends = set()
            async with ctx.pool.acquire() as conn:
                for _ in range(15):
                    assert await conn.fetchval(Q.workspace_count) == 1
                    assert await conn.fetchval(Q.server_now, None) is not None
                    backends.add(await conn.fetchval("SELECT pg_backend_pid()"))
            return backends

        served = await asyncio.gather(*(client() for _ in range(10)))
        assert w.workspace_id
    # The clients really shared server connections: some of them ran on more than one.
    assert any(len(backends) > 1 for backends in served)


async def test_runtime_claims_through_pgbouncer_are_held_to_the_agent_cap_and_woken_by_listen(db_url, pgbouncer):
    # The cap (HOOKGATE_AGENT_MAX_CONCURRENCY) is no session setting here, and the long-poll's LISTEN is on
    # the direct URL: with the fallback poll at 30 s only a notification can end the wait early.
    settings = make_settings(pgbouncer.url(db_url), direct_database_url=db_url, agent_max_concurrency=2,
                             runtime_claim_poll_s=30.0)
    async with open_context(settings, migrate=False) as ctx:
        w = await factories.world(ctx)
        agent = await factories.pull_agent(w, max_concurrency=2)
        ap = await factories.autopilot(w, agent.row["id"], mode="create_issue")
        await ctx.pool.execute("UPDATE agent SET max_concurrency = 50 WHERE id = $1", agent.row["id"])  # an older row
        app = create_app(ctx)
        auth = {"Authorization": f"Bearer {agent.runtime_token}"}

        async def run_now() -> None:
            async with ctx.pool.acquire() as conn:
                await factories.dispatched_run(conn, ap["id"])

        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hooks.test") as http:
                for _ in range(4):
                    await run_now()
                claims = [await http.post("/v1/runtime/claim", json={"wait_s": 0}, headers=auth) for _ in range(4)]
                assert [c.status_code for c in claims] == [200, 200, 204, 204]
                # A report frees a slot; the next claim waits, and a new run's NOTIFY wakes it at once.
                held = claims[0].json()
                done = await http.post(f"/v1/runtime/tasks/{held['task']['id']}/report", headers=auth,
                                       json={"lease_token": held["lease_token"], "status": "succeeded"})
                assert done.status_code == 200, done.text
                async with ctx.pool.acquire() as conn:  # the two runs left queued are not due for a while
                    await conn.execute("UPDATE agent_task SET available_at = now() + interval '1 hour' "
                                       "WHERE status = 'queued'")

                async def later() -> None:
                    await asyncio.sleep(0.3)
                    await run_now()

                loop = asyncio.get_running_loop()
                start = loop.time()
                maker = asyncio.create_task(later())
                woken = await http.post("/v1/runtime/claim", json={"wait_s": 10}, headers=auth)
                await maker
                assert woken.status_code == 200 and 0.3 <= loop.time() - start < 3
        finally:
            await shutdown(app)


@pytest.fixture
async def empty_db(server_url: str) -> AsyncIterator[str]:
    """A database with nothing in it (not cloned from the migrated template); dropped afterwards."""
    async with databases.scratch(server_url, f"hg_pooler_{os.getpid()}") as url:
        yield url


@pytest.fixture
def read_only_bouncer(server_url: str, empty_db: str) -> Iterator[PgBouncer]:
    """A PgBouncer whose entry ``hg_read_only`` is ``empty_db`` with every server connection read-only.

    Whatever goes through it cannot write: migrations that ran through the pool would fail. Its URL
    (:func:`_read_only_url`) accepts such a server, as Hookgate would not by default (it asks for read-write).
    """
    name = urlsplit(empty_db).path.lstrip("/")
    bouncer = PgBouncer.start(server_url, databases={
        "hg_read_only": f"dbname={name} connect_query='SET default_transaction_read_only = on'"})
    try:
        yield bouncer
    finally:
        bouncer.stop()


def _read_only_url(bouncer: PgBouncer) -> str:
    return bouncer.named("hg_read_only") + "?target_session_attrs=any"


async def _applied(dsn: str) -> int:
    return int(await databases.fetchval(dsn, "SELECT count(*) FROM hookgate_migrations"))


async def test_the_roles_migrate_on_the_direct_url(empty_db, read_only_bouncer):
    pooled = _read_only_url(read_only_bouncer)
    probe = await asyncpg.connect(pooled, statement_cache_size=0)
    try:
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):  # the pool's URL cannot migrate anything
            await probe.execute("CREATE TABLE nope (id integer)")
    finally:
        await probe.close()
    async with open_context(make_settings(pooled, direct_database_url=empty_db)) as ctx:
        assert ctx.pooler == "transaction"
        assert await ctx.pool.fetchval(Q.workspace_count) == 0  # the pool reads the migrated schema
    assert await _applied(empty_db) == len(migrations.shipped())


async def test_hookgate_migrate_runs_on_the_direct_url(empty_db, read_only_bouncer):
    env = {"HOOKGATE_DATABASE_URL": _read_only_url(read_only_bouncer),
           "HOOKGATE_DIRECT_DATABASE_URL": empty_db, "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY}
    out = await asyncio.to_thread(hookgate, "migrate", env=env)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["applied"]) > len(migrations.shipped())  # migrations and function files
    assert await _applied(empty_db) == len(migrations.shipped())


async def test_a_pooler_without_a_direct_url_is_a_config_error_naming_the_setting(db_url, pgbouncer):
    # LISTEN, the scheduler's liveness lock and the migrations' lock need a session: nothing to fall back on.
    for pooler in ("detect", "transaction"):
        with pytest.raises(ConfigError, match="HOOKGATE_DIRECT_DATABASE_URL"):
            async with open_context(make_settings(pgbouncer.url(db_url), pooler=pooler), migrate=False):
                pass


async def test_pooler_none_keeps_prepared_statements_and_detect_finds_no_pooler_on_a_direct_url(db_url, pgbouncer):
    async with open_context(make_settings(db_url), migrate=False) as ctx:
        assert ctx.pooler == "none" and ctx.direct_dsn == ctx.dsn == db_url
    # Said explicitly (a session-mode pool, say), the setting wins over detection and needs no direct URL.
    session = PgBouncer.start(pgbouncer.server_url, pool_mode="session")
    try:
        async with open_context(make_settings(session.url(db_url), pooler="none"), migrate=False) as ctx:
            assert ctx.pooler == "none"
            async with ctx.pool.acquire() as conn:
                for _ in range(3):
                    assert await conn.fetchval(Q.workspace_count) == 0
    finally:
        session.stop()
