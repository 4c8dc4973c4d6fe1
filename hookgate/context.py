"""Everything a role needs at run time: settings, the pool, the keyring, and the embedded server if any."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from hookgate import crypto, database, migrations
from hookgate.settings import ConfigError, Settings, decode_secret_key

log = logging.getLogger("hookgate")

EMBEDDED_DATABASE = "hookgate"


@dataclass
class Context:
    """Shared by every role in a process: one pool, one keyring, one set of settings.

    ``dsn`` is the pool's URL; ``direct_dsn`` the one of connections that need a real session (LISTEN, the
    scheduler's liveness lock, migrations): the same URL unless the pool goes through a transaction-mode
    pooler (``pooler`` is then ``"transaction"``).
    """

    settings: Settings
    dsn: str
    pool: asyncpg.Pool
    keyring: crypto.Keyring
    direct_dsn: str = ""
    pooler: str = "none"

    def __post_init__(self) -> None:
        self.direct_dsn = self.direct_dsn or self.dsn


def with_database(dsn: str, name: str) -> str:
    """The same server URL pointing at another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


@contextlib.asynccontextmanager
async def embedded_server(settings: Settings) -> AsyncIterator[str]:
    """Start (or attach to) the embedded PostgreSQL in the data dir; yields the Hookgate database URL."""
    from hookgate.embedded import EmbeddedPostgres, EmbeddedPostgresError

    server = EmbeddedPostgres(settings.data_dir)
    try:
        await asyncio.to_thread(server.start)
        dsn = await asyncio.to_thread(server.ensure_database, EMBEDDED_DATABASE)
    except EmbeddedPostgresError as exc:
        await asyncio.to_thread(server.stop)
        raise ConfigError(str(exc)) from None
    try:
        yield dsn
    finally:
        await asyncio.to_thread(server.stop)


def keyring_for(settings: Settings) -> crypto.Keyring:
    """The keyring from HOOKGATE_SECRET_KEY, generated into the data dir in embedded mode."""
    keys = settings.secret_keys()
    if not keys and settings.embedded:
        keys = [decode_secret_key(crypto.ensure_key_file(settings.data_dir))]
    return crypto.Keyring(keys)


async def resolve_pooler(settings: Settings, dsn: str) -> str:
    """``"transaction"`` when the pool's URL is a transaction-mode pooler's (said, or detected), else ``"none"``.

    Raises ConfigError when it is one but no direct URL is set: LISTEN, the scheduler's liveness lock and the
    migrations' lock would then go through the pooler, which hands each statement to any server connection.
    Checks that the database is reachable on the way (detection opens a connection anyway).
    """
    if settings.pooler == "detect":
        found = await database.detect_pooler(dsn)
    else:
        await database.check_reachable(dsn)
        found = settings.pooler == "transaction"
    if found and settings.direct_database_url is None:
        said = "is" if settings.pooler == "transaction" else "answers like"
        raise ConfigError(f"HOOKGATE_DATABASE_URL {said} a transaction-mode pooler (PgBouncer): set "
                          "HOOKGATE_DIRECT_DATABASE_URL to PostgreSQL itself (or a session-mode pool) for LISTEN, "
                          "locks and migrations, or HOOKGATE_POOLER=none if this pool is in session mode")
    return "transaction" if found else "none"


@dataclass(frozen=True)
class Located:
    """Where the database is: the pool's URL, the URL of what needs a real session, what is between (a pooler)."""

    dsn: str
    direct_dsn: str
    pooler: str


@contextlib.asynccontextmanager
async def open_database(settings: Settings, *, migrate: bool = True) -> AsyncIterator[Located]:
    """Resolve the database (embedded or configured), check that it answers, migrate if asked; yields its URLs.

    Migrations run on the direct URL (their advisory lock is a session's). An embedded server started here is
    stopped on exit (unless another process still uses it).
    """
    async with contextlib.AsyncExitStack() as stack:
        if settings.database_url is None:
            dsn = direct = await stack.enter_async_context(embedded_server(settings))
            await database.check_reachable(dsn)
            pooler = "none"
        else:
            dsn = settings.database_url.get_secret_value()
            direct = settings.direct_database_url.get_secret_value() if settings.direct_database_url else dsn
            pooler = await resolve_pooler(settings, dsn)
            if direct != dsn:
                try:
                    await database.check_reachable(direct)
                except ConfigError as exc:
                    raise ConfigError(f"HOOKGATE_DIRECT_DATABASE_URL: {exc}") from None
        if migrate:
            conn = await database.connect(direct)
            try:
                applied = await migrations.migrate(conn)
            finally:
                await conn.close()
            if applied:
                log.info("migrations applied", extra={"migrations": applied})
        yield Located(dsn, direct, pooler)


@contextlib.asynccontextmanager
async def open_context(settings: Settings, *, migrate: bool = True, **pool_args: Any) -> AsyncIterator[Context]:
    """Resolve the database (embedded or configured), migrate if asked, open the pool; close on exit.

    The pool uses no statement cache and no session state when its URL is a transaction-mode pooler's
    (:func:`resolve_pooler`).
    """
    keyring = keyring_for(settings)
    async with open_database(settings, migrate=migrate) as where:
        pool = await database.create_pool(
            where.dsn, min_size=settings.pool_min_size, max_size=settings.pool_max_size,
            pooler=where.pooler == "transaction", **pool_args
        )
        try:
            yield Context(settings=settings, dsn=where.dsn, pool=pool, keyring=keyring, direct_dsn=where.direct_dsn,
                          pooler=where.pooler)
        finally:
            await pool.close()
