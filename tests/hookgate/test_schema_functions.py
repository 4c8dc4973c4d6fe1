"""sql/functions/ holds the live definition of every SQL function, and the migrator keeps the database on it.

Like procrastinate's migration test: one database is built from the numbered migrations alone, one by the
migrator (migrations, then the function files). Their schemas, function signatures included, must be identical,
and so must the function definitions, but for a file changed on purpose since (``CHANGED_SINCE_MIGRATIONS``).
"""

import contextlib
import os
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from hookgate import database, migrations
from sql import Q
from tests import databases

_FUNCTIONS = """
    FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
    WHERE p.pronamespace = 'public'::regnamespace
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                                                  AND d.deptype = 'e')
    ORDER BY 1, 2"""

# Everything a migration can shape, each row rendered by PostgreSQL itself so two databases compare as text.
SCHEMA = {
    "relations": """
        SELECT relname, relkind, CASE WHEN relkind IN ('v', 'm') THEN pg_get_viewdef(oid) END FROM pg_class
        WHERE relnamespace = 'public'::regnamespace ORDER BY 1""",
    "columns": """
        SELECT table_name, ordinal_position, column_name, data_type, udt_name, is_nullable, column_default,
               character_maximum_length, numeric_precision, is_identity, is_generated, generation_expression
        FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2""",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
    "constraints": """
        SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid) FROM pg_constraint
        WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
        WHERE NOT tgisinternal ORDER BY 1, 2""",
    # Functions of the public schema that no extension owns. A signature changes only by a migration.
    "functions": f"""
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid), l.lanname,
               p.prokind
        {_FUNCTIONS}""",
}

# What a function file decides: body, settings, behaviour (and all of it as PostgreSQL prints it back).
DEFINITIONS = f"""
    SELECT p.proname, pg_get_function_identity_arguments(p.oid), p.prosrc, p.proconfig, p.provolatile,
           p.prosecdef, p.proparallel, p.proisstrict, p.proleakproof, p.procost, p.prorows, pg_get_functiondef(p.oid)
    {_FUNCTIONS}"""

# Functions whose file was changed on purpose after the migrations that made them, so their definition no longer
# equals the migrations' (their signature still does).
CHANGED_SINCE_MIGRATIONS: frozenset[str] = frozenset({
    # a lowered concurrency cap stays strict; an unhealthy agent gets probe slots only; HOOKGATE_AGENT_MAX_CONCURRENCY;
    # 0023_agent_cap_argument made it with a placeholder body
    "hookgate_slots_take",
    # 0020_fair_deliveries, 0023_agent_cap_argument, 0030_workspace_rooms and 0033_take_named made it with a
    # placeholder body: its definition is the file's
    "hookgate_delivery_take",
    # no JIT, as every function that pins its plans; the free-slot test by key, as hookgate_slots_take's
    "hookgate_slots_settle",
    # the free-slot test by key, as hookgate_slots_take's
    "hookgate_slots_resize",
    # takes its slots from hookgate_slots_take (one slot rule); stamps attempt_started_at; fair across autopilots;
    # plans with key lookups only and no sorts an index spares, expects a few rows, locks its candidates by key;
    # 0023_agent_cap_argument made it with a placeholder body
    "hookgate_task_claim",
    # locks its row and writes it once per take (it was an upsert and an update)
    "hookgate_pace_take",
})


async def schema_of(conn: asyncpg.Connection) -> dict[str, list[tuple[object, ...]]]:
    """The schema of one database, kind by kind, and the function definitions by name."""
    found = {kind: [tuple(row) for row in await conn.fetch(query)] for kind, query in SCHEMA.items()}
    return found | {"definitions": [tuple(row) for row in await conn.fetch(DEFINITIONS)]}


@contextlib.asynccontextmanager
async def scratch_database(server_url: str, name: str) -> AsyncIterator[asyncpg.Connection]:
    """An empty database for this module, dropped afterwards."""
    async with databases.scratch(server_url, name) as url:
        conn = await database.connect(url)
        try:
            yield conn
        finally:
            await conn.close()


@pytest.fixture(scope="module")
async def schemas(server_url: str) -> AsyncIterator[tuple[dict, dict]]:
    """(schema from the migrations alone, schema from the migrator: migrations then function files)."""
    async with (scratch_database(server_url, f"hg_fn_migrations_{os.getpid()}") as history,
                scratch_database(server_url, f"hg_fn_files_{os.getpid()}") as current):
        await history.execute(Q.migration_table_create)
        for migration in migrations.shipped():
            await history.execute(migration.sql)
        await migrations.migrate(current)
        yield await schema_of(history), await schema_of(current)


@pytest.mark.parametrize("kind", SCHEMA)
def test_the_function_files_give_the_same_schema_as_the_migrations(schemas, kind):
    history, current = schemas
    assert history[kind], f"no {kind} found: the catalog query is wrong"
    assert current[kind] == history[kind]


def test_the_function_files_define_the_functions_as_the_migrations_did(schemas):
    history, current = schemas
    made = {row[0]: row for row in history["definitions"] if row[0] not in CHANGED_SINCE_MIGRATIONS}
    defined = {row[0]: row for row in current["definitions"] if row[0] not in CHANGED_SINCE_MIGRATIONS}
    assert made, "no function found: the catalog query is wrong"
    for name, row in made.items():
        # A migration replaced the function and its file was not ported, or the file was changed on purpose.
        assert defined[name] == row, (
            f"sql/functions/{name}.sql differs from what the migrations made: port a migration's text into the "
            f"file, or, for a deliberate change of the file, add {name} to CHANGED_SINCE_MIGRATIONS")


def test_every_function_of_the_migrated_database_has_a_file_and_every_file_a_function(schemas):
    history, _ = schemas
    in_database = [row[0] for row in history["functions"]]
    assert len(in_database) == len(set(in_database)), "an overloaded name cannot have one file per function"
    assert {f.name for f in migrations.shipped_functions()} == set(in_database)
    assert set(in_database) >= CHANGED_SINCE_MIGRATIONS


def test_every_function_that_pins_its_plans_also_switches_jit_off(schemas):
    # A plan pinned by enable_* = off can be costed far above jit_above_cost (a disabled node, or estimates
    # from statistics autovacuum took mid-drain): the take then compiled ~320 functions on every call.
    _, current = schemas
    pinned = {row[0]: row[3] for row in current["definitions"]
              if any(c.startswith("enable_") and c.endswith("=off") for c in row[3] or [])}
    assert {"hookgate_delivery_take", "hookgate_task_claim"} <= set(pinned), "the catalog query is wrong"
    assert [name for name, config in pinned.items() if "jit=off" not in config] == []


def test_the_function_files_ship_in_the_package():
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "functions/*.sql" in pyproject["tool"]["setuptools"]["package-data"]["sql"]


async def _functions(conn: asyncpg.Connection) -> dict[str, tuple[object, ...]]:
    return {row[0]: row for row in await conn.fetch(DEFINITIONS)}


async def test_a_stale_function_is_brought_back_by_the_migrator_when_its_checksum_differs(conn):
    current = await _functions(conn)
    # By hand: another body for one function, the settings of another dropped; both recorded as older files.
    await conn.execute("CREATE OR REPLACE FUNCTION hookgate_uuid7() RETURNS uuid LANGUAGE sql "
                       "AS $$ SELECT '00000000-0000-0000-0000-000000000000'::uuid $$")
    await conn.execute("ALTER FUNCTION hookgate_slots_take(uuid, integer, integer) RESET ALL")
    await conn.execute("UPDATE hookgate_functions SET checksum = 'older' "
                       "WHERE name IN ('hookgate_uuid7', 'hookgate_slots_take')")
    assert await conn.fetchval("SELECT hookgate_uuid7()::text") == "00000000-0000-0000-0000-000000000000"
    stale = [f.file_name for f in await migrations.stale_functions(conn)]
    assert stale == ["functions/hookgate_slots_take.sql", "functions/hookgate_uuid7.sql"]

    assert await migrations.migrate(conn) == stale
    assert await _functions(conn) == current
    assert await migrations.stale_functions(conn) == []


async def test_a_function_file_missing_from_the_records_is_applied(conn):
    await conn.execute("ALTER FUNCTION hookgate_delivery_take(integer, double precision, uuid, integer, timestamptz,"
                       " integer, double precision, text, integer, double precision, double precision, jsonb,"
                       " uuid[], integer[], integer, uuid[], integer[], integer, integer, uuid[]) RESET ALL")
    await conn.execute("DELETE FROM hookgate_functions WHERE name = 'hookgate_delivery_take'")
    assert await migrations.migrate(conn) == ["functions/hookgate_delivery_take.sql"]
    config = await conn.fetchval("SELECT proconfig FROM pg_proc WHERE proname = 'hookgate_delivery_take'")
    assert config == ["plan_cache_mode=force_generic_plan", "enable_seqscan=off", "enable_hashjoin=off",
                      "enable_mergejoin=off", "jit=off"]


async def test_an_unchanged_function_file_is_not_applied_again(conn):
    watch = """SELECT f.name, f.applied_at, p.xmin::text FROM hookgate_functions f
               JOIN pg_proc p ON p.proname = f.name ORDER BY 1"""
    before = await conn.fetch(watch)
    assert len(before) == len(migrations.shipped_functions())
    assert await migrations.migrate(conn) == []
    assert await conn.fetch(watch) == before


async def test_records_of_function_files_no_longer_shipped_are_forgotten(conn):
    await conn.execute("INSERT INTO hookgate_functions (name, checksum) VALUES ('hookgate_gone', 'x')")
    assert await migrations.migrate(conn) == []
    assert await conn.fetchval("SELECT count(*) FROM hookgate_functions WHERE name = 'hookgate_gone'") == 0
