import asyncio
import dataclasses
import re

import pytest

from hookgate import database, migrations
from sql import migration_files
from tests import databases


def test_migration_files_are_numbered_without_gaps_and_named_snake_case():
    files = migration_files()
    assert files, "no migrations shipped"
    for expected, (number, name, text) in enumerate(files, start=1):
        assert re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", name), name
        assert number == expected, f"{name} should be {expected:04d}"
        assert text.strip(), f"{name} is empty"
    assert [m.version for m in migrations.shipped()] == list(range(1, len(files) + 1))


EXPECTED_TABLES = {
    "workspace", "member", "api_key", "agent", "agent_instance", "squad", "squad_member", "autopilot",
    "autopilot_collaborator", "autopilot_rule_version", "autopilot_trigger", "webhook_delivery",
    "autopilot_run", "issue", "agent_task", "sys_cron_executions", "audit_log", "idempotency_key",
    "hookgate_migrations", "trigger_pace", "agent_slot", "hookgate_functions", "agent_health", "task_attempt",
    "notification_channel", "notification", "trigger_rejection_alert", "webhook_delivery_dedupe", "dashboard_session",
}
EXPECTED_INDEXES = {
    "webhook_delivery_dedupe_pkey", "webhook_delivery_queued_idx", "autopilot_run_planned_uq",
    "autopilot_run_delivery_uq", "agent_task_queue_idx", "agent_task_lease_idx", "autopilot_trigger_due_idx",
    "sys_cron_executions_stale_idx", "notification_due_idx", "webhook_delivery_rejected_idx",
}


async def test_applying_all_migrations_to_an_empty_database_gives_the_expected_schema(server_url):
    async with databases.scratch(server_url, "hg_mig_empty") as url:
        conn = await database.connect(url)
        assert await migrations.pending(conn) == migrations.shipped()
        applied = await migrations.migrate(conn)
        assert applied == [m.name for m in migrations.shipped()] + [f.file_name for f in migrations.shipped_functions()]
        tables = {r["relname"] for r in await conn.fetch(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') "
            "AND NOT relispartition")}
        assert tables == EXPECTED_TABLES
        rows = await conn.fetch("SELECT indexname FROM pg_indexes WHERE schemaname='public'")
        indexes = {r["indexname"] for r in rows}
        assert EXPECTED_INDEXES <= indexes
        claim = await conn.fetchval(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = $1 AND tgrelid = $2::regclass",
            "webhook_delivery_dedupe_claim", "webhook_delivery")
        assert "BEFORE INSERT" in claim and "rejected" in claim
        assert await migrations.migrate(conn) == []
        assert await migrations.pending(conn) == []
        await conn.close()


async def test_two_migrators_at_once_apply_each_migration_and_function_file_once(server_url):
    async with databases.scratch(server_url, "hg_mig_race") as url:
        conns = [await database.connect(url) for _ in range(4)]
        results = await asyncio.gather(*(migrations.migrate(c) for c in conns))
        applied = [name for result in results for name in result]
        files = [f.file_name for f in migrations.shipped_functions()]
        assert sorted(applied) == sorted([m.name for m in migrations.shipped()] + files)
        rows = await conns[0].fetchval("SELECT count(*) FROM hookgate_migrations")
        assert rows == len(migrations.shipped())
        assert await conns[0].fetchval("SELECT count(*) FROM hookgate_functions") == len(files)
        for c in conns:
            await c.close()


async def test_an_edited_applied_migration_is_refused(conn):
    await conn.execute("UPDATE hookgate_migrations SET checksum = 'x' WHERE version = 1")
    with pytest.raises(migrations.MigrationError, match="edited"):
        await migrations.pending(conn)


async def test_a_database_migrated_before_a_comment_rewording_is_not_refused(conn):
    for version, (released, _) in migrations.REWORDED.items():
        await conn.execute("UPDATE hookgate_migrations SET checksum = $2 WHERE version = $1", version, released)
    assert await migrations.pending(conn) == []


def test_a_reworded_migration_accepts_its_released_checksum_only_while_its_statements_stay():
    shipped = {m.version: m for m in migrations.shipped()}
    assert sorted(migrations.REWORDED) == [1, 2, 3, 5, 8]
    for version, (released, statements) in migrations.REWORDED.items():
        migration = shipped[version]
        assert migration.checksum != released
        assert migration.statements_checksum == statements
        assert migration.applied_as(released)
        reworded = dataclasses.replace(migration, sql="-- reworded again\n" + migration.sql)
        assert reworded.applied_as(released)
        edited = dataclasses.replace(migration, sql=migration.sql + "\nSELECT 1;\n")
        assert not edited.applied_as(released)
        assert not migration.applied_as("x")


async def test_a_database_ahead_of_the_code_is_refused(conn):
    await conn.execute("INSERT INTO hookgate_migrations (version, name, checksum) VALUES (9999, '9999_x.sql', 'x')")
    with pytest.raises(migrations.MigrationError, match="lacks"):
        await migrations.pending(conn)
