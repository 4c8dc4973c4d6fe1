import asyncio
from datetime import timedelta

import pytest

from autopilot import admission, dispatch, tasks
from hookgate.errors import LeaseLost
from scheduler.maintenance import leases
from tests import factories


async def _tasks(ctx, conn, n=1, **agent_kw):
    w = await factories.world(ctx)
    agent = await factories.http_agent(w, **agent_kw)
    ap = await factories.autopilot(w, agent.row["id"])
    ids = []
    for _ in range(n):
        adm = await admission.admit(conn, autopilot_id=ap["id"], source="api", payload={}, heartbeat_timeout_s=120.0)
        ids.append((await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0))).task_id)
    return agent.row["id"], ids


async def _claim(conn, agent_id, **kw):
    return await tasks.claim(conn, agent_id=agent_id, lease_s=kw.pop("lease_s", 60), holder=kw.pop("holder", "h"),
                             actor_type="runtime", **kw)


async def test_claims_never_exceed_the_agent_cap_even_when_raced(ctx, conn):
    agent_id, _ = await _tasks(ctx, conn, n=10, max_concurrency=3)

    async def one():
        async with ctx.pool.acquire() as c:
            return await _claim(c, agent_id, limit=2)

    results = await asyncio.gather(*(one() for _ in range(8)))
    assert sum(len(r) for r in results) == 3
    assert await _claim(conn, agent_id) == []
    audits = await conn.fetchval("SELECT count(*) FROM audit_log WHERE action = 'CLAIM'")
    assert audits == 3


async def test_stale_holder_gets_lease_lost_changes_nothing_and_is_audited(ctx, conn):
    agent_id, [task_id] = await _tasks(ctx, conn)
    [old] = await _claim(conn, agent_id, holder="old")
    later = await conn.fetchval("SELECT now() + interval '2 minutes'")
    swept = await leases.sweep(conn, now=later, heartbeat_timeout_s=120.0)
    assert swept.requeued == 1
    [new] = await _claim(conn, agent_id, holder="new")
    assert new.attempt == 2 and new.lease_token != old.lease_token
    with pytest.raises(LeaseLost):
        await tasks.renew(conn, task_id, old.lease_token, lease_s=60, actor_type="runtime", actor_id="old")
    with pytest.raises(LeaseLost):
        await tasks.report(conn, task_id, old.lease_token, tasks.Report("succeeded", result={"late": True}),
                           actor_type="runtime", actor_id="old")
    row = await conn.fetchrow("SELECT * FROM agent_task WHERE id = $1", task_id)
    assert row["status"] == "running" and row["lease_token"] == new.lease_token and row["result"] is None
    late = await conn.fetchrow("SELECT * FROM audit_log WHERE action = 'LATE_RESULT' AND subject_id = $1 "
                               "AND detail->>'op' = 'report'",
                               str(task_id))
    assert late["detail"]["result"] == {"late": True}
    expire = await conn.fetchrow("SELECT * FROM audit_log WHERE action = 'EXPIRE'")
    assert expire["detail"]["attempt"] == 1
    assert await tasks.report(conn, task_id, new.lease_token, tasks.Report("succeeded"), actor_type="runtime",
                              actor_id="new") == "applied"


async def test_the_same_report_twice_is_applied_once(ctx, conn):
    agent_id, [task_id] = await _tasks(ctx, conn)
    [held] = await _claim(conn, agent_id)
    rep = tasks.Report("succeeded", result={"n": 1})
    assert await tasks.report(conn, task_id, held.lease_token, rep, actor_type="runtime", actor_id="h") == "applied"
    assert await tasks.report(conn, task_id, held.lease_token, rep, actor_type="runtime", actor_id="h") == "repeated"
    assert await conn.fetchval("SELECT count(*) FROM audit_log WHERE action = 'RELEASE'") == 1


async def test_a_retryable_failure_requeues_with_backoff_until_attempts_run_out(ctx, conn):
    agent_id, [task_id] = await _tasks(ctx, conn)
    await conn.execute("UPDATE agent_task SET max_attempts = 2 WHERE id = $1", task_id)
    rep = tasks.Report("failed", error="flaky", retry_class="transient", retry_after_s=0)
    [first] = await _claim(conn, agent_id)
    await tasks.report(conn, task_id, first.lease_token, rep, actor_type="runtime", actor_id="h")
    assert await conn.fetchval("SELECT status FROM agent_task WHERE id = $1", task_id) == "queued"
    [second] = await _claim(conn, agent_id)
    await tasks.report(conn, task_id, second.lease_token, rep, actor_type="runtime", actor_id="h")
    row = await conn.fetchrow("SELECT status, attempt FROM agent_task WHERE id = $1", task_id)
    assert (row["status"], row["attempt"]) == ("failed", 2)


async def test_renew_extends_the_lease_and_claim_honours_backoff(ctx, conn):
    agent_id, [task_id] = await _tasks(ctx, conn)
    [held] = await _claim(conn, agent_id, lease_s=10)
    expires = await tasks.renew(conn, task_id, held.lease_token, lease_s=3600, actor_type="runtime", actor_id="h")
    assert expires - held.lease_expires_at > timedelta(minutes=50)
    await tasks.report(conn, task_id, held.lease_token,
                       tasks.Report("failed", retry_class="transient", retry_after_s=300), actor_type="runtime",
                       actor_id="h")
    assert await _claim(conn, agent_id) == []
    later = await conn.fetchval("SELECT now() + interval '301 s'")
    assert len(await _claim(conn, agent_id, now=later)) == 1


async def test_watchdog_fails_a_task_with_no_attempt_left_and_marks_silent_runtimes_offline(ctx, conn):
    agent_id, [task_id] = await _tasks(ctx, conn)
    await conn.execute("UPDATE agent_task SET max_attempts = 1 WHERE id = $1", task_id)
    await _claim(conn, agent_id)
    w = await factories.world(ctx, "other")
    pull = await factories.pull_agent(w)
    await conn.execute("INSERT INTO agent_instance (agent_id, instance, heartbeat_at) "
                       "VALUES ($1, 'i1', now() - interval '3 minutes')", pull.row["id"])
    later = await conn.fetchval("SELECT now() + interval '2 minutes'")
    swept = await leases.sweep(conn, now=later, heartbeat_timeout_s=120.0)
    assert (swept.requeued, swept.failed, swept.offline) == (0, 1, 1)
    run = await conn.fetchrow("SELECT r.* FROM autopilot_run r JOIN agent_task t ON t.run_id = r.id "
                              "WHERE t.id = $1", task_id)
    assert run["status"] == "failed" and run["reason"] == "lease expired"
