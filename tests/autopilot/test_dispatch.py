import asyncio

from autopilot import admission, agents, dispatch, lifecycle, tasks
from hookgate.errors import LeaseLost
from tests import factories


async def _run(ctx, conn, mode="run_only", pull=False, **ap_kw):
    w = await factories.world(ctx)
    agent = await (factories.pull_agent(w) if pull else factories.http_agent(w))
    ap = await factories.autopilot(w, agent.row["id"], mode=mode, **ap_kw)
    adm = await admission.admit(conn, autopilot_id=ap["id"], source="api", payload={"event": "deploy"},
                                heartbeat_timeout_s=120.0)
    return w, agent, ap, adm.run_id


async def test_run_only_makes_one_task_and_a_second_dispatch_changes_nothing(ctx, conn):
    _, _agent, _, run_id = await _run(ctx, conn)
    first = await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    second = await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    assert first.status == "queued" and first.issue_id is None
    assert second.task_id == first.task_id and second.status == "queued"
    assert await conn.fetchval("SELECT count(*) FROM agent_task") == 1
    assert await conn.fetchval("SELECT count(*) FROM issue") == 0


async def test_create_issue_makes_the_issue_even_when_the_runtime_is_offline(ctx, conn):
    _, _, _ap, run_id = await _run(ctx, conn, mode="create_issue", pull=True,
                                  issue_title_template="$title on $event")
    result = await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    issue = await conn.fetchrow("SELECT * FROM issue WHERE run_id = $1", run_id)
    assert result.status == "queued" and result.issue_id == issue["id"]
    assert issue["title"] == "triage on deploy" and issue["status"] == "todo"
    task = await conn.fetchrow("SELECT * FROM agent_task WHERE id = $1", result.task_id)
    assert task["issue_id"] == issue["id"] and task["status"] == "queued"


async def test_run_only_records_skipped_with_a_reason_when_the_agent_cannot_run(ctx, conn):
    _, agent, _, run_id = await _run(ctx, conn)
    await conn.execute("UPDATE agent SET archived_at = now() WHERE id = $1", agent.row["id"])
    result = await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
    assert result.status == "skipped" and run["reason_code"] == "agent_archived" and run["finished_at"]
    assert await conn.fetchval("SELECT count(*) FROM agent_task") == 0


async def test_a_pause_after_admission_does_not_drop_the_run(ctx, conn):
    _, _, ap, run_id = await _run(ctx, conn)
    await conn.execute("UPDATE autopilot SET status = 'paused' WHERE id = $1", ap["id"])
    assert (await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))).status == "queued"


async def test_squad_work_goes_to_the_leader(world, conn):
    leader = await factories.http_agent(world, name="leader")
    member = await factories.http_agent(world, name="member")
    squad = await agents.create_squad(conn, workspace_id=world.workspace_id, name="sq",
                                      leader_id=leader.row["id"], member_ids=[member.row["id"]])
    ap = await factories.autopilot(world, squad["id"], assignee_type="squad")
    adm = await admission.admit(conn, autopilot_id=ap["id"], source="api", payload={}, heartbeat_timeout_s=120.0)
    result = await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    assert await conn.fetchval("SELECT agent_id FROM agent_task WHERE id = $1", result.task_id) == leader.row["id"]


async def test_a_half_made_run_is_repaired_not_duplicated(ctx, conn):
    _, _, _, run_id = await _run(ctx, conn, mode="create_issue")
    # A crash after the issue, before the task: issue_created with no task.
    async with conn.transaction():
        run = await conn.fetchrow(dispatch.Q.run_lock_for_dispatch, run_id, 120.0)
        await dispatch.ensure_issue(conn, run)
    assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "issue_created"
    result = await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    assert result.status == "queued"
    assert await conn.fetchval("SELECT count(*) FROM issue") == 1
    assert await conn.fetchval("SELECT count(*) FROM agent_task") == 1


async def test_concurrent_dispatches_of_one_run_make_one_issue_and_one_task(ctx, conn):
    _, _, _, run_id = await _run(ctx, conn, mode="create_issue")

    async def one():
        async with ctx.pool.acquire() as c:
            return await dispatch.dispatch_run(c, run_id, dispatch.Options(heartbeat_timeout_s=120.0))

    results = await asyncio.gather(*(one() for _ in range(8)))
    assert len({r.task_id for r in results}) == 1
    assert await conn.fetchval("SELECT count(*) FROM issue") == 1
    assert await conn.fetchval("SELECT count(*) FROM agent_task") == 1


async def test_issue_done_or_cancelled_ends_the_run_and_a_late_report_is_refused(ctx, conn):
    _, agent, _, run_id = await _run(ctx, conn, mode="create_issue")
    result = await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    [held] = await tasks.claim(conn, agent_id=agent.row["id"], lease_s=60, holder="h", actor_type="worker")
    assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "running"
    await lifecycle.issue_status_changed(conn, result.issue_id, "cancelled")
    run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
    assert run["status"] == "cancelled" and run["reason_code"] == "issue_cancelled"
    try:
        await tasks.report(conn, held.id, held.lease_token, tasks.Report("succeeded"), actor_type="agent",
                           actor_id=None)
        raise AssertionError("late report applied")
    except LeaseLost:
        pass
    assert await conn.fetchval("SELECT status FROM agent_task WHERE id = $1", held.id) == "cancelled"


async def test_task_outcome_ends_the_run(ctx, conn):
    _, agent, _, run_id = await _run(ctx, conn)
    await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    [held] = await tasks.claim(conn, agent_id=agent.row["id"], lease_s=60, holder="h", actor_type="worker")
    await tasks.report(conn, held.id, held.lease_token, tasks.Report("failed", error="boom"), actor_type="agent",
                       actor_id=None)
    run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
    assert (run["status"], run["reason_code"], run["reason"]) == ("failed", "task_failed", "boom")
