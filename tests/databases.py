"""Scratch databases on a PostgreSQL server, for tests and benchmarks: made empty or migrated, dropped after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from hookgate import database, migrations
from hookgate.context import with_database


async def create(server_url: str, name: str, *, migrated: bool = False) -> str:
    """Database ``name`` on ``server_url``, dropped first if it exists, empty or ``migrated``; its URL."""
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    if migrated:
        conn = await database.connect(url)
        try:
            await migrations.migrate(conn)
        finally:
            await conn.close()
    return url


async def drop(server_url: str, name: str) -> None:
    """Drop database ``name`` on ``server_url`` if it exists, whoever is still connected to it."""
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def fetchval(url: str, query: str) -> Any:
    """The one value ``query`` returns, read on a connection of its own to ``url``."""
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


@asynccontextmanager
async def scratch(server_url: str, name: str, *, migrated: bool = False) -> AsyncIterator[str]:
    """:func:`create`'s URL for the block; the database is dropped when it ends, however it ends."""
    try:
        yield await create(server_url, name, migrated=migrated)
    finally:
        await drop(server_url, name)


async def _admin(server_url: str, *statements: str) -> None:
    conn = await asyncpg.connect(server_url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()
