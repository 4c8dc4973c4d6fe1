"""An installation at migration 0023 with rows upgrades to time partitions without a rewrite of its tables.

0024_partitions attaches each existing table as the first partition of its new parent: the same relfilenode
(not rewritten), every row and id still found through the parent, the live dedupe keys carried over, the
audit log's ids going on where they left off; the upgraded schema is the one a fresh install gets.
"""

import os
import uuid

import asyncpg

from gateway.ingress.batch import uuid7
from hookgate import migrations
from hookgate.context import open_context, with_database
from sql import Q
from tests import factories
from tests.conftest import make_settings
from tests.hookgate.test_schema_functions import schema_of, scratch_database

TABLES = ("webhook_delivery", "task_attempt", "audit_log")


async def _to_0023(conn: asyncpg.Connection) -> None:
    """Apply and record migrations 1 to 23 only, as an installation of the previous release has them."""
    await conn.execute(Q.migration_table_create)
    for migration in migrations.shipped()[:23]:
        async with conn.transaction():
            await conn.execute(migration.sql)
            await conn.execute(Q.migration_record, migration.version, migration.name, migration.checksum)


async def _rows(conn: asyncpg.Connection, ctx) -> dict[str, object]:
    """A workspace with an autopilot and a trigger, deliveries of every kind, task attempts and audit entries."""
    w = await factories.world(ctx)
    agent = await factories.http_agent(w)
    ap = await factories.autopilot(w, agent.row["id"])
    # The trigger as a 0023 installation stores it: today's insert names columns later migrations added.
    trigger = await conn.fetchrow(
        """INSERT INTO autopilot_trigger (workspace_id, autopilot_id, kind, token_digest, token_ct, token_hint,
                                          provider, published_by_type, published_by_id)
           VALUES ($1, $2, 'webhook', $3, '\\x00', 'hint', 'generic', 'member', $4) RETURNING *""",
        w.workspace_id, ap["id"], os.urandom(32), w.owner_id)
    ids = {}
    for n, (status, signature, key) in enumerate([("dispatched", "valid", "live-1"), ("queued", "valid", "live-2"),
                                                  ("rejected", "invalid", "forged"), ("failed", "valid", "gone"),
                                                  ("ignored", "not_required", None)]):
        ids[status] = await factories.delivery(conn, trigger, id=uuid7(1_700_000_000 + n), signature_status=signature,
                                               status=status, dedupe_key=key, body_mismatch_count=n)
    attempt = await conn.fetchval(
        """INSERT INTO task_attempt (workspace_id, task_id, agent_id, attempt, started_at, finished_at, duration_ms,
                                     outcome) VALUES ($1, $2, $3, 1, now(), now(), 5, 'succeeded') RETURNING id""",
        w.workspace_id, uuid.uuid4(), agent.row["id"])
    audit_max = await conn.fetchval("SELECT max(id) FROM audit_log")
    assert audit_max, "the bootstrap writes audit entries"
    return {"trigger": trigger, "ap": ap, "w": w, "deliveries": ids, "attempt": attempt, "audit_max": audit_max}


async def test_an_installation_at_0023_upgrades_without_rewriting_its_tables(server_url):
    name = f"hg_partitions_upgrade_{os.getpid()}"
    async with (scratch_database(server_url, name) as conn,
                scratch_database(server_url, f"hg_partitions_fresh_{os.getpid()}") as fresh):
        await _to_0023(conn)
        async with open_context(make_settings(with_database(server_url, name)), migrate=False) as ctx:
            made = await _rows(conn, ctx)
        files = {t: await conn.fetchval("SELECT pg_relation_filenode($1::regclass)", t) for t in TABLES}
        counts = {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in TABLES}

        applied = await migrations.migrate(conn)
        assert "0024_partitions.sql" in applied

        for t in TABLES:
            assert await conn.fetchval("SELECT relkind::text FROM pg_class WHERE relname = $1", t) == "p"
            legacy = f"{t}_legacy"
            assert await conn.fetchval("SELECT pg_relation_filenode($1::regclass)", legacy) == files[t], \
                f"{t} was rewritten"
            assert await conn.fetchval(f"SELECT count(*) FROM {t}") == counts[t]
            assert await conn.fetchval(f"SELECT count(*) FROM ONLY {legacy}") == counts[t]
        for status, id_ in made["deliveries"].items():
            assert await conn.fetchval("SELECT status FROM webhook_delivery WHERE id = $1", id_) == status
        assert await conn.fetchval("SELECT outcome FROM task_attempt WHERE id = $1", made["attempt"]) == "succeeded"
        # the keys that counted (not the rejected nor the failed one's) were carried over and still hold
        keys = dict(await conn.fetch("SELECT dedupe_key, delivery_id FROM webhook_delivery_dedupe"))
        assert keys == {"live-1": made["deliveries"]["dispatched"], "live-2": made["deliveries"]["queued"]}
        trigger, ap, w = made["trigger"], made["ap"], made["w"]
        inserted = await conn.fetch(
            """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, provider, event,
                                             signature_status, dedupe_key)
               SELECT $1, $2, $3, 'generic', 'e', 'valid', k FROM unnest($4::text[]) AS k RETURNING dedupe_key""",
            w.workspace_id, trigger["id"], ap["id"], ["live-1", "live-2", "forged", "gone"])
        assert sorted(r["dedupe_key"] for r in inserted) == ["forged", "gone"]
        # the audit log's ids go on; the old rows are still append-only
        new = await conn.fetchval("INSERT INTO audit_log (action, actor_type, subject_type) "
                                  "VALUES ('UPGRADED', 'system', 'x') RETURNING id")
        assert new > made["audit_max"]
        for statement in ("DELETE FROM audit_log_legacy", "TRUNCATE audit_log_legacy"):
            try:
                await conn.execute(statement)
            except asyncpg.InsufficientPrivilegeError:
                continue
            raise AssertionError(f"{statement} went through")

        await migrations.migrate(fresh)
        upgraded, installed = await schema_of(conn), await schema_of(fresh)
        for kind in upgraded:
            assert upgraded[kind] == installed[kind], kind
