"""The promises of ARCHITECTURE §1 hold in the schema itself, whatever the application code does."""

from datetime import UTC, datetime

import asyncpg
import pytest

from tests import factories


@pytest.fixture
async def hook(ctx):
    s = await factories.small(ctx)
    return s.world, s.autopilot, s.trigger


async def _delivery(conn, trigger, key, status="queued", signature="valid"):
    return await factories.delivery(conn, trigger, dedupe_key=key, signature_status=signature, status=status)


async def test_second_delivery_with_same_trigger_and_dedupe_key_is_not_inserted(conn, hook):
    # As ON CONFLICT DO NOTHING on the key: the key is held in webhook_delivery_dedupe (deliveries are partitioned).
    _, _, trigger = hook
    first = await _delivery(conn, trigger, "d-1")
    assert await _delivery(conn, trigger, "d-1") is None
    assert [r["id"] for r in await conn.fetch("SELECT id FROM webhook_delivery WHERE dedupe_key = 'd-1'")] == [first]


async def test_rejected_deliveries_do_not_hold_the_dedupe_key(conn, hook):
    _, _, trigger = hook
    await _delivery(conn, trigger, "d-2", status="rejected", signature="invalid")
    await _delivery(conn, trigger, "d-2", status="rejected", signature="missing")
    await _delivery(conn, trigger, "d-2")  # the real one still gets in


async def test_same_dedupe_key_on_another_trigger_is_a_different_delivery(conn, hook):
    w, ap, trigger = hook
    other, _ = await factories.webhook_trigger(w, ap)
    await _delivery(conn, trigger, "gh-1")
    await _delivery(conn, other, "gh-1")


async def _run(conn, w, ap, **kw):
    cols = {"workspace_id": w.workspace_id, "autopilot_id": ap["id"], "source": "webhook",
            "accountable_id": w.owner_id, **kw}
    names = ", ".join(cols)
    params = ", ".join(f"${i}" for i in range(1, len(cols) + 1))
    return await conn.fetchval(f"INSERT INTO autopilot_run ({names}) VALUES ({params}) RETURNING id", *cols.values())


async def test_second_run_for_the_same_delivery_is_refused(conn, hook):
    w, ap, trigger = hook
    delivery = await _delivery(conn, trigger, "d-3")
    await _run(conn, w, ap, trigger_id=trigger["id"], webhook_delivery_id=delivery)
    with pytest.raises(asyncpg.UniqueViolationError):
        await _run(conn, w, ap, trigger_id=trigger["id"], webhook_delivery_id=delivery)


async def test_second_run_for_the_same_trigger_and_planned_at_is_refused(conn, hook):
    w, ap, _ = hook
    schedule = await factories.schedule_trigger(w, ap, "* * * * *", datetime(2026, 1, 1, tzinfo=UTC))
    planned = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    await _run(conn, w, ap, trigger_id=schedule["id"], planned_at=planned, source="schedule")
    with pytest.raises(asyncpg.UniqueViolationError):
        await _run(conn, w, ap, trigger_id=schedule["id"], planned_at=planned, source="schedule")


async def test_second_cron_execution_for_the_same_job_scope_and_plan_time_is_refused(conn):
    insert = """INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status, lease_token,
                                                 stale_after)
                VALUES ('j', 'trigger', 's1', '2026-01-01T00:00:00Z', 'RUNNING', gen_random_uuid(), now())"""
    await conn.execute(insert)
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute(insert)


async def test_audit_log_refuses_update_delete_and_truncate(conn):
    await conn.execute(
        "INSERT INTO audit_log (action, actor_type, subject_type, subject_id) VALUES ('CLAIM', 'worker', 'task', 'x')"
    )
    for statement in ("UPDATE audit_log SET action = 'RELEASE'", "DELETE FROM audit_log", "TRUNCATE audit_log"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            await conn.execute(statement)
    assert await conn.fetchval("SELECT action FROM audit_log") == "CLAIM"


async def test_rule_versions_are_immutable(conn, hook):
    _, ap, _ = hook
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("UPDATE autopilot_rule_version SET change = 'x' WHERE autopilot_id = $1", ap["id"])
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("DELETE FROM autopilot_rule_version WHERE autopilot_id = $1", ap["id"])


async def test_status_checks_refuse_unknown_states(conn, hook):
    w, ap, trigger = hook
    with pytest.raises(asyncpg.CheckViolationError):
        await _delivery(conn, trigger, "d-4", status="lost")
    with pytest.raises(asyncpg.CheckViolationError):
        await _run(conn, w, ap, status="skipped")  # skipped needs a reason code
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.execute("UPDATE autopilot SET status = 'sleeping' WHERE id = $1", ap["id"])


async def test_one_task_per_run_attempt(conn, hook):
    w, ap, trigger = hook
    run = await _run(conn, w, ap, trigger_id=trigger["id"])
    agent_id = ap["assignee_id"]
    insert = """INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key)
                VALUES ($1, $2, $3, $4)"""
    await conn.execute(insert, w.workspace_id, run, agent_id, f"run:{run}:1")
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute(insert, w.workspace_id, run, agent_id, f"run:{run}:1")


async def test_ids_are_time_ordered(conn):
    ids = [await conn.fetchval("SELECT hookgate_uuid7()") for _ in range(50)]
    assert ids == sorted(ids, key=lambda u: u.bytes[:6])
    assert all(u.version == 7 for u in ids)
