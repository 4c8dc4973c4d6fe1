"""Forward-only migrations: each ``sql/migrations/NNNN_name.sql`` once, in order, in its own transaction.

Then the live function definitions, ``sql/functions/<name>.sql``: every file whose checksum differs from the
one recorded is re-applied (``CREATE OR REPLACE``), all in one transaction. Two processes migrating at once
serialise on an advisory lock; the second finds nothing pending.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from hookgate.database import Conn
from hookgate.errors import HookgateError
from sql import Q, function_files, migration_files

# An arbitrary, fixed 64-bit key: "hookgate migrate" in hex-ish; any process migrating takes it.
MIGRATION_LOCK_KEY = 0x686F6F6B67617465
FILE_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
FUNCTION_FILE_NAME = re.compile(r"^([a-z][a-z0-9_]*)\.sql$")

class MigrationError(HookgateError):
    """The shipped migrations and the database disagree (edited file, unknown version, bad name)."""


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 of the file, recorded so an edited, already-applied migration is noticed."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class FunctionFile:
    """The live definition of one SQL function, ``sql/functions/<name>.sql``."""

    name: str
    sql: str

    @property
    def file_name(self) -> str:
        """The file's path under ``sql/``, as reported among the applied names."""
        return f"functions/{self.name}.sql"

    @property
    def checksum(self) -> str:
        """SHA-256 of the file, recorded so only a changed file is applied again."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


def shipped() -> list[Migration]:
    """The migrations in the package, validated for naming and numbering (1, 2, 3, … without gaps)."""
    found = []
    for number, name, text in migration_files():
        if not FILE_NAME.match(name):
            raise MigrationError(f"migration file name {name!r} is not NNNN_snake_case.sql")
        found.append(Migration(number, name, text))
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise MigrationError(f"migration {migration.name} should be numbered {expected:04d}")
    return found


def shipped_functions() -> list[FunctionFile]:
    """The function files in the package, each a ``CREATE OR REPLACE`` of the function it is named after."""
    found = []
    for file_name, text in function_files():
        match = FUNCTION_FILE_NAME.match(file_name)
        if not match:
            raise MigrationError(f"function file name {file_name!r} is not snake_case.sql")
        # A plain CREATE would fail on every database where the function exists, i.e. all of them.
        if not re.search(rf"^CREATE OR REPLACE FUNCTION {match.group(1)}\(", text, re.MULTILINE):
            raise MigrationError(f"functions/{file_name} does not CREATE OR REPLACE FUNCTION {match.group(1)}")
        found.append(FunctionFile(match.group(1), text))
    return found


async def applied(conn: Conn) -> dict[int, str]:
    """Versions already applied with their checksums; empty when the table does not exist yet."""
    exists = await conn.fetchval(Q.migration_table_exists)
    if not exists:
        return {}
    rows = await conn.fetch(Q.migration_applied_list)
    return {row["version"]: row["checksum"] for row in rows}


async def pending(conn: Conn) -> list[Migration]:
    """Shipped migrations not yet applied; raises MigrationError if the database is ahead or edited."""
    done = await applied(conn)
    files = shipped()
    known = {m.version: m for m in files}
    for version, checksum in done.items():
        if version not in known:
            raise MigrationError(f"database has migration {version} that this version of Hookgate lacks")
        if known[version].checksum != checksum:
            raise MigrationError(f"migration {known[version].name} was edited after it was applied")
    return [m for m in files if m.version not in done]


async def stale_functions(conn: Conn) -> list[FunctionFile]:
    """Shipped function files not applied here in their current text (all of them before migration 0012)."""
    done: dict[str, str] = {}
    if await conn.fetchval(Q.function_table_exists):
        done = {row["name"]: row["checksum"] for row in await conn.fetch(Q.function_applied_list)}
    return [f for f in shipped_functions() if done.get(f.name) != f.checksum]


async def migrate(conn: Conn) -> list[str]:
    """Apply every pending migration, then every changed function file; returns the names applied."""
    await conn.execute(Q.migration_lock, MIGRATION_LOCK_KEY)
    try:
        await conn.execute(Q.migration_table_create)
        names = []
        for migration in await pending(conn):
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(Q.migration_record, migration.version, migration.name, migration.checksum)
            names.append(migration.name)
        names += await _apply_functions(conn)
        # Partitions ahead at every start too, not only from the scheduler's hourly job (scheduler.maintenance).
        await conn.fetch(Q.partition_ensure, None)
        return names
    finally:
        await conn.execute(Q.migration_unlock, MIGRATION_LOCK_KEY)


async def _apply_functions(conn: Conn) -> list[str]:
    """Re-apply the changed function files in one transaction, so functions that call each other change together."""
    async with conn.transaction():
        stale = await stale_functions(conn)
        for function in stale:
            await conn.execute(function.sql)
            await conn.execute(Q.function_record, function.name, function.checksum)
        await conn.execute(Q.function_forget_others, [f.name for f in shipped_functions()])
    return [f.file_name for f in stale]
