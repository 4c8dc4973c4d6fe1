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
    """Shared by every role in a process: one pool, one keyring, one set of settings."""

    settings: Settings
    dsn: str
    pool: asyncpg.Pool
    keyring: crypto.Keyring


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


@contextlib.asynccontextmanager
async def open_database(settings: Settings, *, migrate: bool = True) -> AsyncIterator[str]:
    """Resolve the database (embedded or configured), check that it answers, migrate if asked; yields its URL.

    An embedded server started here is stopped on exit (unless another process still uses it).
    """
    async with contextlib.AsyncExitStack() as stack:
        if settings.database_url is None:
            dsn = await stack.enter_async_context(embedded_server(settings))
        else:
            dsn = settings.database_url.get_secret_value()
        await database.check_reachable(dsn)
        if migrate:
            conn = await database.connect(dsn)
            try:
                applied = await migrations.migrate(conn)
            finally:
                await conn.close()
            if applied:
                log.info("migrations applied", extra={"migrations": applied})
        yield dsn


@contextlib.asynccontextmanager
async def open_context(settings: Settings, *, migrate: bool = True, **pool_args: Any) -> AsyncIterator[Context]:
    """Resolve the database (embedded or configured), migrate if asked, open the pool; close on exit."""
    keyring = keyring_for(settings)
    async with open_database(settings, migrate=migrate) as dsn:
        pool = await database.create_pool(
            dsn, min_size=settings.pool_min_size, max_size=settings.pool_max_size, **pool_args
        )
        try:
            yield Context(settings=settings, dsn=dsn, pool=pool, keyring=keyring)
        finally:
            await pool.close()
