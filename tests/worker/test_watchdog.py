"""The lease watchdog runs from the scheduler (every minute) and from the worker's own loop."""

from datetime import timedelta

from autopilot import admission, dispatch, tasks
from scheduler.role import default_jobs
from scheduler.spec import Every
from tests import factories
from worker.watchdog import WatchdogLoop


async def test_the_scheduler_runs_the_lease_watchdog_every_minute(settings):
    (job,) = [job for job in default_jobs(settings) if job.name == "lease_watchdog"]
    assert job.cadence == Every(timedelta(seconds=60))


async def test_the_worker_loop_sweeps_a_silent_runtime_offline(ctx, conn):
    pull = await factories.pull_agent(await factories.world(ctx))
    await conn.execute("INSERT INTO agent_instance (agent_id, instance, heartbeat_at) "
                       "VALUES ($1, 'i1', now() - interval '3 minutes')", pull.row["id"])
    assert await WatchdogLoop(ctx).run_once() == 0
    assert await conn.fetchval("SELECT status FROM agent_instance WHERE agent_id = $1", pull.row["id"]) == "offline"


async def _expire_and_sweep(ctx, conn, task_id):
    """The task's lease runs out; the worker's watchdog loop passes once."""
    await conn.execute("UPDATE agent_task SET lease_expires_at = now() - interval '1 second' WHERE id = $1", task_id)
    await WatchdogLoop(ctx).run_once()


async def test_an_expired_lease_leaves_a_lease_lost_attempt_and_the_task_queued_again(ctx, conn):
    s = await factories.small(ctx, pull=True)
    pull = s.agent
    await conn.execute("INSERT INTO agent_instance (agent_id, instance, heartbeat_at) VALUES ($1, 'i1', now())",
                       pull.row["id"])
    adm = await admission.admit(conn, autopilot_id=s.autopilot["id"], source="api", payload={},
                                heartbeat_timeout_s=120.0)
    await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0, task_max_attempts=2))
    [claimed] = await tasks.claim(conn, agent_id=pull.row["id"], lease_s=60, holder="i1", actor_type="runtime")
    await _expire_and_sweep(ctx, conn, claimed.id)
    task = await conn.fetchrow("SELECT status, attempt, lease_token FROM agent_task WHERE id = $1", claimed.id)
    assert (task["status"], task["attempt"], task["lease_token"]) == ("queued", 1, None)
    [row] = await conn.fetch("SELECT * FROM task_attempt WHERE task_id = $1", claimed.id)
    assert (row["attempt"], row["outcome"], row["error"]) == (1, "lease_lost", "lease expired")
    assert (row["agent_id"], row["run_id"], row["duration_ms"] >= 0) == (pull.row["id"], adm.run_id, True)
    # The last attempt's lease expiring fails the task: a second lease_lost row.
    [again] = await tasks.claim(conn, agent_id=pull.row["id"], lease_s=60, holder="i1", actor_type="runtime")
    await _expire_and_sweep(ctx, conn, again.id)
    assert await conn.fetchval("SELECT status FROM agent_task WHERE id = $1", claimed.id) == "failed"
    rows = await conn.fetch("SELECT attempt, outcome FROM task_attempt WHERE task_id = $1 ORDER BY id", claimed.id)
    assert [(r["attempt"], r["outcome"]) for r in rows] == [(1, "lease_lost"), (2, "lease_lost")]
