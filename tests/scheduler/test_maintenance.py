"""Maintenance jobs: retention in batches, the auto-pause monitor, the lease watchdog, one-line jobs."""

from datetime import timedelta

import pytest

from scheduler.maintenance.auto_pause import auto_pause_job
from scheduler.maintenance.leases import lease_watchdog_job
from scheduler.maintenance.partitions import Retention, partitions_job
from scheduler.maintenance.periodic import periodic_job
from scheduler.maintenance.retention import retention_job
from tests import factories
from tests.scheduler.conftest import utc

DAY = timedelta(days=1)


async def _delivery(conn, trigger, status, age_days):
    return await conn.fetchval(
        """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, received_at, body, provider,
                                         event, signature_status, status)
           VALUES ($1, $2, $3, clock_timestamp() - make_interval(days => $5), '\\x7b7d', 'generic', 'e',
                   'not_required', $4) RETURNING id""",
        trigger["workspace_id"], trigger["id"], trigger["autopilot_id"], status, age_days)


async def _execution(conn, status, age_days, retry=False):
    await conn.execute(
        """INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status, lease_token,
                                            stale_after, finished_at, next_retry_at, max_attempts)
           VALUES ('old_job', 'global', '-', clock_timestamp() - make_interval(days => $2) - random() * interval '1h',
                   $1, gen_random_uuid(), clock_timestamp(),
                   CASE WHEN $1 <> 'RUNNING' THEN clock_timestamp() - make_interval(days => $2) END,
                   CASE WHEN $3 THEN clock_timestamp() END, 3)""", status, age_days, retry)


async def test_retention_drops_old_finished_bodies_and_executions_in_batches_and_keeps_live_rows(setup, ctx):
    trigger, _ = await factories.webhook_trigger(setup.world, setup.autopilot)
    async with ctx.pool.acquire() as conn:
        old = [await _delivery(conn, trigger, "dispatched", 40) for _ in range(5)]
        queued_old = await _delivery(conn, trigger, "queued", 40)
        recent = await _delivery(conn, trigger, "ignored", 1)
        for _ in range(5):
            await _execution(conn, "SUCCESS", 40)
        await _execution(conn, "FAILED", 40, retry=True)
        await _execution(conn, "SUCCESS", 1)
    await setup.scheduler([retention_job(timedelta(days=30), batch_size=2)]).run_once()
    async with ctx.pool.acquire() as conn:
        bodies = dict(await conn.fetch("SELECT id, body IS NOT NULL FROM webhook_delivery"))
        left = await conn.fetch("SELECT status, next_retry_at IS NOT NULL AS retry FROM sys_cron_executions "
                                "WHERE job_name = 'old_job' ORDER BY status")
        result = await conn.fetchval("SELECT result FROM sys_cron_executions WHERE job_name = 'retention'")
    assert not any(bodies[i] for i in old) and bodies[queued_old] and bodies[recent]
    assert [(r["status"], r["retry"]) for r in left] == [("FAILED", True), ("SUCCESS", False)]
    assert (result["bodies_dropped"], result["executions_deleted"]) == (5, 5)


async def _idempotency_key(conn, world, key, age):
    await conn.execute(
        """INSERT INTO idempotency_key (workspace_id, api_key_id, method, route, key, request_digest, created_at)
           SELECT $1, id, 'POST', '/v1/autopilots', $2, 'd', clock_timestamp() - $3::interval
           FROM api_key WHERE workspace_id = $1""", world.workspace_id, key, age)


async def test_retention_deletes_idempotency_keys_past_their_5_minute_window_in_batches(setup, ctx):
    async with ctx.pool.acquire() as conn:
        for i in range(5):
            await _idempotency_key(conn, setup.world, f"old-{i}", timedelta(minutes=6))
        await _idempotency_key(conn, setup.world, "live", timedelta(minutes=4))
    await setup.scheduler([retention_job(timedelta(days=30), batch_size=2)]).run_once()
    async with ctx.pool.acquire() as conn:
        keys = [r["key"] for r in await conn.fetch("SELECT key FROM idempotency_key")]
        result = await conn.fetchval("SELECT result FROM sys_cron_executions WHERE job_name = 'retention'")
    assert keys == ["live"] and result["idempotency_keys_deleted"] == 5


async def _session(conn, key_id, n, expires_in):
    await conn.execute("INSERT INTO dashboard_session (digest, key_id, expires_at) VALUES ($1, $2, now() + $3)",
                       bytes([n]) * 32, key_id, expires_in)


async def test_retention_deletes_expired_dashboard_sessions_in_batches(setup, ctx):
    async with ctx.pool.acquire() as conn:
        key_id = await conn.fetchval("SELECT id FROM api_key WHERE workspace_id = $1", setup.world.workspace_id)
        for n in range(5):
            await _session(conn, key_id, n, -timedelta(minutes=1))
        await _session(conn, key_id, 9, timedelta(hours=1))
    await setup.scheduler([retention_job(timedelta(days=30), batch_size=2)]).run_once()
    async with ctx.pool.acquire() as conn:
        left = [r["digest"] for r in await conn.fetch("SELECT digest FROM dashboard_session")]
        result = await conn.fetchval("SELECT result FROM sys_cron_executions WHERE job_name = 'retention'")
    assert left == [bytes([9]) * 32] and result["dashboard_sessions_deleted"] == 5


async def _attempt(conn, task_id, age):
    return await conn.fetchval(
        """INSERT INTO task_attempt (workspace_id, task_id, run_id, agent_id, attempt, started_at, finished_at,
                                     duration_ms, outcome, error)
           SELECT workspace_id, id, run_id, agent_id, 1, clock_timestamp() - $2::interval - interval '1 second',
                  clock_timestamp() - $2::interval, 1000, 'failed', 'agent answered 500'
           FROM agent_task WHERE id = $1 RETURNING id""", task_id, age)


@pytest.mark.parametrize("direct", [False, True], ids=["pooled", "direct"])
async def test_task_attempts_go_with_their_week_partition_past_the_retention_age(setup, ctx, direct):
    # No row-by-row DELETE any more: the partitions job, run here by the scheduler at a later instant, drops
    # the week partitions of task_attempt whose whole range is older than the retention age. "direct": on a
    # connection of its own (HOOKGATE_DIRECT_DATABASE_URL), as behind a transaction-mode pooler.
    async with ctx.pool.acquire() as conn:
        task = await conn.fetchval(
            "INSERT INTO agent_task (workspace_id, agent_id, idempotency_key) VALUES ($1, $2, 'k') RETURNING id",
            setup.world.workspace_id, setup.autopilot["assignee_id"])
        for _ in range(3):
            await _attempt(conn, task, timedelta(days=1))
        now = await conn.fetchval("SELECT now()")
    job = partitions_job(Retention(attempts=timedelta(days=30)), direct_dsn=ctx.direct_dsn if direct else None)
    await setup.scheduler([job]).run_once(now=now + timedelta(days=20))
    assert await ctx.pool.fetchval("SELECT count(*) FROM task_attempt") == 3, "not yet past retention"
    await setup.scheduler([job]).run_once(now=now + timedelta(days=45))
    async with ctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM task_attempt") == 0
        result = await conn.fetchval("SELECT result FROM sys_cron_executions WHERE job_name = 'partitions' "
                                     "ORDER BY plan_time DESC LIMIT 1")
    assert "task_attempt_legacy" in result["dropped"] and result["deferred"] == []


async def _runs(conn, autopilot, failed, completed):
    for status, n in (("failed", failed), ("completed", completed)):
        await conn.execute(
            """INSERT INTO autopilot_run (workspace_id, autopilot_id, source, status, finished_at)
               SELECT $1, $2, 'api', $3, now() FROM generate_series(1, $4)""",
            autopilot["workspace_id"], autopilot["id"], status, n)


async def test_auto_pause_pauses_an_autopilot_whose_runs_mostly_fail_with_a_system_version_and_audit(setup, ctx):
    agent = await factories.http_agent(setup.world, name="other")
    healthy = await factories.autopilot(setup.world, agent.row["id"], title="healthy")
    few = await factories.autopilot(setup.world, agent.row["id"], title="few")
    async with ctx.pool.acquire() as conn:
        await _runs(conn, setup.autopilot, failed=45, completed=5)   # 50 runs, 90 % failed
        await _runs(conn, healthy, failed=44, completed=6)           # 88 %
        await _runs(conn, few, failed=49, completed=0)               # only 49 runs
    await setup.scheduler([auto_pause_job()]).run_once()
    async with ctx.pool.acquire() as conn:
        statuses = dict(await conn.fetch("SELECT id, status FROM autopilot"))
        version = await conn.fetchrow("SELECT * FROM autopilot_rule_version WHERE autopilot_id = $1 "
                                      "ORDER BY version DESC LIMIT 1", setup.autopilot["id"])
        audit = await conn.fetchrow("SELECT * FROM audit_log WHERE action = 'AUTO_PAUSE'")
    assert statuses == {setup.autopilot["id"]: "paused", healthy["id"]: "active", few["id"]: "active"}
    assert (version["change"], version["publisher_type"], version["config"]["status"]) == (
        "auto_pause", "system", "paused")
    assert (audit["subject_id"], audit["actor_type"]) == (str(setup.autopilot["id"]), "system")
    assert audit["detail"]["failed_runs"] == 45 and audit["detail"]["finished_runs"] == 50


async def test_a_one_line_maintenance_job_runs_once_per_interval_across_schedulers(setup, ctx):
    calls = []

    async def sweep(conn):
        calls.append(await conn.fetchval("SELECT 1"))
        return {"expired": 0}

    job = periodic_job("lease_watchdog", timedelta(seconds=60), sweep)
    first, second = setup.scheduler([job]), setup.scheduler([job])
    at = utc(2027, 2, 1, 9, 0, 1)
    await first.run_once(at)
    await second.run_once(at + timedelta(seconds=20))
    assert len(calls) == 1
    await second.run_once(at + timedelta(seconds=60))
    await first.run_once(at + timedelta(hours=3))  # after downtime: one run, not a burst
    assert len(calls) == 3
    results = await ctx.pool.fetch("SELECT result FROM sys_cron_executions WHERE job_name = 'lease_watchdog'")
    assert {r["result"]["expired"] for r in results} == {0}


async def test_the_lease_watchdog_job_records_what_its_sweep_did(setup, ctx):
    await setup.scheduler([lease_watchdog_job(120.0)]).run_once()
    result = await ctx.pool.fetchval("SELECT result FROM sys_cron_executions WHERE job_name = 'lease_watchdog'")
    assert result == {"requeued": 0, "failed": 0, "offline": 0}


async def test_resuming_an_auto_paused_autopilot_starts_its_failure_window_afresh(setup, ctx, client):
    async with ctx.pool.acquire() as conn:
        await _runs(conn, setup.autopilot, failed=50, completed=0)
        now = await conn.fetchval("SELECT now()")
    scheduler = setup.scheduler([auto_pause_job()])
    await scheduler.run_once(now)
    assert await _status(ctx, setup.autopilot) == "paused"

    resumed = await client.post(f"/v1/autopilots/{setup.autopilot['id']}/resume", headers=setup.world.auth)
    assert resumed.status_code == 200 and resumed.json()["status"] == "active"
    await scheduler.run_once(now + 6 * timedelta(minutes=1))  # the old failures no longer count
    assert await _status(ctx, setup.autopilot) == "active"

    async with ctx.pool.acquire() as conn:
        await _runs(conn, setup.autopilot, failed=49, completed=0)  # new failures, one short of the rule
    await scheduler.run_once(now + 12 * timedelta(minutes=1))
    assert await _status(ctx, setup.autopilot) == "active"
    async with ctx.pool.acquire() as conn:
        await _runs(conn, setup.autopilot, failed=1, completed=0)
    await scheduler.run_once(now + 18 * timedelta(minutes=1))
    assert await _status(ctx, setup.autopilot) == "paused"
    audits = await ctx.pool.fetch("SELECT detail FROM audit_log WHERE action = 'AUTO_PAUSE' ORDER BY id")
    assert [a["detail"]["failed_runs"] for a in audits] == [50, 50]


async def _status(ctx, autopilot):
    return await ctx.pool.fetchval("SELECT status FROM autopilot WHERE id = $1", autopilot["id"])
