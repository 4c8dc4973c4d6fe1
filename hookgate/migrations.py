"""Forward-only migrations: each ``sql/migrations/NNNN_name.sql`` once, in order, in its own transaction.

Two processes migrating at once serialise on an advisory lock; the second finds nothing pending.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from hookgate.database import Conn
from sql import Q, migration_files

# An arbitrary, fixed 64-bit key: "hookgate migrate" in hex-ish; any process migrating takes it.
MIGRATION_LOCK_KEY = 0x686F6F6B67617465
FILE_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

class MigrationError(Exception):
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


async def migrate(conn: Conn) -> list[str]:
    """Apply every pending migration, each in its own transaction; returns the names applied."""
    await conn.execute(Q.migration_lock, MIGRATION_LOCK_KEY)
    try:
        await conn.execute(Q.migration_table_create)
        names = []
        for migration in await pending(conn):
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(Q.migration_record, migration.version, migration.name, migration.checksum)
            names.append(migration.name)
        return names
    finally:
        await conn.execute(Q.migration_unlock, MIGRATION_LOCK_KEY)
