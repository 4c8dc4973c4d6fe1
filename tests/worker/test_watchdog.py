import json

from scheduler.role import default_jobs
from worker import watchdog


async def test_the_scheduler_runs_the_lease_watchdog_every_minute(settings):
    names = [job.name for job in default_jobs(settings)]
    assert "lease_watchdog" in names


async def test_sweep_job_returns_a_json_result_for_the_execution_log(conn):
    result = await watchdog.sweep_job(120.0)(conn)
    assert result == {"requeued": 0, "failed": 0, "offline": 0}
    json.dumps(result)
