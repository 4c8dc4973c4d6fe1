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

#: Released migrations whose full-line comments were reworded after release, their statements untouched:
#: version -> (SHA-256 of the file as released, SHA-256 of its statements). A database that recorded the
#: released checksum has applied the same statements, so it is not refused as edited, as long as the
#: statements still hash the same (a later edit of a statement is refused as any other edit).
REWORDED: dict[int, tuple[str, str]] = {
    1: ("5245dfb3960eb006bc7ea5ed8fffbd93880c4d4181c5ea9d2972d1e905533442",
        "0d5d6e97a0a6063402513a98b751bc32c9791855433f095fa5ea442eb89b2f7f"),
    2: ("1bc0320925c083bdadac01fbddd5695b42cbd4846a62d85654b98f47357a25eb",
        "88708f5a25c9e7a6ae0218dac6d2a164301f0877fdaabfe151d643d5101e6a77"),
    3: ("ee9fa1220c25a8fd8c245b5a6d0598b1af80ee0d9c74711cc66f59af685fa461",
        "e19faa6f6fdadfdc8f60e1cade5e0fa7d82c5184c685e14f8145a68d2fcf88c1"),
    5: ("1f1b73e4275fa3ccb97956b5a8bc47ac2491cb6472dc0588688e71d6ddb3b0c4",
        "43e15c43ecb9e6c49a1a6c5959a3773a4d12bca4c58fd57586629ece6f011ec4"),
    8: ("80697e65e9e70b243ea0843a2d41c392e48bf181cb62684586b7ac448fae2187",
        "46cc897db685237fdbf6f5b0aaf4f8f782ba8ede1299eff2878a7e42bc3d7261"),
}


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

    @property
    def statements_checksum(self) -> str:
        """SHA-256 of the file without its full-line comments: what a rewording of them leaves unchanged."""
        statements = [line for line in self.sql.splitlines() if not line.lstrip().startswith("--")]
        return hashlib.sha256("\n".join(statements).encode()).hexdigest()

    def applied_as(self, checksum: str) -> bool:
        """Whether a database that recorded ``checksum`` for this version applied these statements."""
        return checksum == self.checksum or REWORDED.get(self.version) == (checksum, self.statements_checksum)


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
        if not known[version].applied_as(checksum):
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
