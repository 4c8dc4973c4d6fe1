"""The lease watchdog runs from the scheduler (every minute) and from the worker's own loop."""

from datetime import timedelta

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
