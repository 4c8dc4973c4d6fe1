"""Test harness: real PostgreSQL, a fresh database per test cloned from a migrated template.

The server is the embedded PostgreSQL by default; set ``HOOKGATE_TEST_DATABASE_URL`` to a server URL
(e.g. ``postgresql://postgres@127.0.0.1:5432/postgres``) to use another one (the CI runs both).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from gateway.app import create_app, shutdown
from gateway.server import HttpServer
from hookgate.context import Context, open_context, with_database
from hookgate.settings import Settings
from tests import databases, factories, processes
from tests.pooler import PgBouncer

TEST_SECRET_KEY = base64.b64encode(b"k" * 32).decode()
#: The suite's agents are local servers: tests opt in to pushing to loopback (tests/security/test_egress.py
#: runs with the default, empty allow list).
TEST_AGENT_ALLOW_CIDRS = "127.0.0.0/8,::1/128"
_counter = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--pooler``: the role processes tests spawn reach the database through a real PgBouncer."""
    parser.addoption(
        "--pooler", action="store_true",
        help="run the hookgate processes started by the spawn fixture with HOOKGATE_DATABASE_URL through a real "
        "PgBouncer in transaction mode (tests/pooler.py) and HOOKGATE_DIRECT_DATABASE_URL straight to the server",
    )


@pytest.fixture(scope="session", autouse=True)
def _no_orphan_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """As root, embedded clusters live under /var/lib/hookgate: remove the ones this session made.

    Tests start embedded servers in temporary data dirs (the suite's own server, ``serve`` processes, the
    chaos cluster); the data dirs go with their temp dirs, the clusters would stay. Runs last (autouse).
    """
    from hookgate import embedded

    before = embedded.shared_clusters()
    yield
    if os.geteuid() == 0:
        embedded.prune_orphan_clusters(embedded.shared_clusters() - before, under=tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Admin URL of the PostgreSQL server the suite uses (embedded unless the env var names one)."""
    configured = os.environ.get("HOOKGATE_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    from hookgate.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="hookgate-test-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        try:
            url = server.start()
            asyncio.run(_without_fsync(url))
            yield url
        finally:
            server.stop()


async def _without_fsync(url: str) -> None:
    """The suite's own throwaway server skips fsync: a test never outlives the machine's page cache.

    Every commit and every cloned database otherwise waits for the disk (each test clones one). Killing the
    server's processes, as some tests do, loses nothing either way; only a machine crash would. Hookgate's
    own embedded server keeps fsync on.
    """
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("ALTER SYSTEM SET fsync = off")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def template_url(server_url: str) -> AsyncIterator[str]:
    """A migrated template database, created once per session."""
    async with databases.scratch(server_url, f"hg_tpl_{os.getpid()}", migrated=True) as url:
        yield url


class DatabaseSupply:
    """Fresh databases cloned from the migrated template a step ahead of the tests, and dropped behind them.

    Cloning a database (a copy of the template's files and a checkpoint) and dropping one each take a few
    hundred milliseconds, most of it waiting on the disk; made in the background of the session's event loop
    while the previous tests run, they cost the suite little. Each test still gets a database no test used.
    """

    def __init__(self, server_url: str, template: str, *, ahead: int = 3, makers: int = 2) -> None:
        self.server_url, self.template = server_url, template
        self._ready: asyncio.Queue[str | BaseException] = asyncio.Queue(maxsize=ahead)
        self._used: asyncio.Queue[str | None] = asyncio.Queue()
        # Two at a time: a clone mostly waits on the disk, and a short test can take one before the next is made.
        self._makers = [asyncio.create_task(self._make()) for _ in range(makers)]
        self._dropper = asyncio.create_task(self._drop())

    async def take(self) -> str:
        """The name of a fresh database, for one test only."""
        got = await self._ready.get()
        if isinstance(got, BaseException):
            raise got
        return got

    def give_back(self, name: str) -> None:
        """The test is over: drop its database (in the background, even if connections linger)."""
        self._used.put_nowait(name)

    async def close(self) -> None:
        """Stop making databases; drop the unused ones and wait until every database handed out is dropped."""
        for maker in self._makers:
            maker.cancel()
        await asyncio.gather(*self._makers, return_exceptions=True)
        while not self._ready.empty():
            got = self._ready.get_nowait()
            if isinstance(got, str):
                self._used.put_nowait(got)
        self._used.put_nowait(None)
        await self._dropper

    async def _make(self) -> None:
        admin = await asyncpg.connect(self.server_url)
        name = None
        try:
            while True:
                name = f"hg_t_{os.getpid()}_{next(_counter)}"
                try:
                    await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}" STRATEGY FILE_COPY')
                except (OSError, asyncpg.PostgresError) as exc:
                    await self._ready.put(exc)
                    continue
                await self._ready.put(name)
                name = None
        finally:
            if name is not None:  # cancelled while waiting to hand it out, or during its CREATE
                await asyncio.shield(admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            await admin.close()

    async def _drop(self) -> None:
        admin = await asyncpg.connect(self.server_url)
        try:
            while (name := await self._used.get()) is not None:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture(scope="session")
async def _databases(server_url: str, template_url: str) -> AsyncIterator[DatabaseSupply]:
    supply = DatabaseSupply(server_url, urlsplit(template_url).path.lstrip("/"))
    try:
        yield supply
    finally:
        await supply.close()


@pytest.fixture
async def db_url(server_url: str, _databases: DatabaseSupply) -> AsyncIterator[str]:
    """A fresh, migrated database for this test only (dropped afterwards, even if connections linger)."""
    name = await _databases.take()
    try:
        yield with_database(server_url, name)
    finally:
        _databases.give_back(name)


def make_settings(db_url: str, **overrides: Any) -> Settings:
    """Settings for a test process pointed at ``db_url``."""
    values: dict[str, Any] = {
        "database_url": db_url, "secret_key": TEST_SECRET_KEY, "public_url": "http://hooks.test",
        "pool_min_size": 1, "pool_max_size": 10, "agent_allow_cidrs": TEST_AGENT_ALLOW_CIDRS,
    }
    return Settings(**(values | overrides))


@pytest.fixture
def settings(db_url: str) -> Settings:
    """Settings for this test's database."""
    return make_settings(db_url)


@pytest.fixture
async def ctx(settings: Settings) -> AsyncIterator[Context]:
    """An open context (pool, keyring) over this test's database."""
    async with open_context(settings, migrate=False) as context:
        yield context


@pytest.fixture
async def conn(ctx: Context) -> AsyncIterator[asyncpg.Connection]:
    """One pooled connection of this test's context."""
    async with ctx.pool.acquire() as connection:
        yield connection


@pytest.fixture
async def world(ctx: Context) -> factories.World:
    """A workspace (acme) with its owner and the owner's key, in this test's database."""
    return await factories.world(ctx)


@contextlib.asynccontextmanager
async def asgi_client(ctx: Context, ip: str = "203.0.113.7") -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client talking to the app in-process over ASGI, as from ``ip``; the app is shut down after."""
    app = create_app(ctx)
    transport = httpx.ASGITransport(app=app, client=(ip, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://hooks.test") as http:
        yield http
    await shutdown(app)


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client talking to the app in-process over ASGI."""
    async with asgi_client(ctx) as http:
        yield http


@contextlib.asynccontextmanager
async def serving(ctx: Context, **kw: Any) -> AsyncIterator[HttpServer]:
    """The app served by uvicorn on a real loopback socket (``HttpServer`` arguments in ``kw``)."""
    server = HttpServer(ctx, **({"host": "127.0.0.1", "port": 0} | kw))
    task = asyncio.create_task(server.run())
    while not server.server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield server
    finally:
        await server.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


@pytest.fixture
async def live_url(ctx: Context) -> AsyncIterator[str]:
    """The app served by uvicorn on a real loopback socket; yields its base URL."""
    async with serving(ctx) as server:
        yield f"http://127.0.0.1:{server.port}"


@pytest.fixture(scope="session")
def pgbouncer(server_url: str) -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode in front of the suite's server (``pgbouncer.url(db_url)``)."""
    bouncer = PgBouncer.start(server_url)
    try:
        yield bouncer
    finally:
        bouncer.stop()


def pooled_env(bouncer: PgBouncer, db_url: str) -> dict[str, str]:
    """A role's database settings behind ``bouncer``: the pool through it, what needs a session straight in."""
    return {"HOOKGATE_DATABASE_URL": bouncer.url(db_url), "HOOKGATE_DIRECT_DATABASE_URL": db_url}


@pytest.fixture
def spawn(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[processes.Spawner]:
    """Start ``hookgate`` roles as separate OS processes over this test's database; all killed after.

    With ``--pooler`` their pools go through a real PgBouncer in transaction mode (:func:`pooled_env`).
    """
    env = {"HOOKGATE_DATABASE_URL": db_url, "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY,
           "HOOKGATE_PUBLIC_URL": "http://hooks.test", "HOOKGATE_AGENT_ALLOW_CIDRS": TEST_AGENT_ALLOW_CIDRS,
           "HOOKGATE_DATA_DIR": str(tmp_path / "data")}  # serve files its cli.json there, not in the work tree
    if request.config.getoption("--pooler"):
        env |= pooled_env(request.getfixturevalue("pgbouncer"), db_url)
    spawner = processes.Spawner(env=env, log_dir=tmp_path)
    try:
        yield spawner
    finally:
        spawner.kill_all()


_loop_errors: list[dict[str, Any]] = []


@pytest.fixture(scope="session", autouse=True)
async def _loop_error_trap() -> AsyncIterator[None]:
    """Record exceptions nobody awaited (a crashed background task); see ``_no_loop_errors``."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: _loop_errors.append(context))
    yield
    loop.set_exception_handler(None)


@pytest.fixture(autouse=True)
def _no_loop_errors() -> Iterator[None]:
    """Any unhandled exception in the event loop during a test fails that test."""
    _loop_errors.clear()
    yield
    errors = [e for e in _loop_errors if "exception" in e or "message" in e]
    _loop_errors.clear()
    assert not errors, f"unhandled event-loop errors: {errors}"
