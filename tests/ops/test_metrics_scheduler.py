"""Scheduler metrics: claimed plans with their fire lag, late occurrences skipped once, failures."""

from datetime import timedelta

from hookgate import metrics
from scheduler.jobs import SCHEDULE_JOB
from tests.scheduler.conftest import Setup, break_run_inserts, setup, utc  # noqa: F401 (the setup fixture)

DAY0 = utc(2027, 2, 1, 9)
SEC = timedelta(seconds=1)


def value(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_fired_occurrence_counts_as_claimed_with_its_lag(setup: Setup):  # noqa: F811
    claimed = value("hookgate_scheduler_plans_total", job=SCHEDULE_JOB, outcome="claimed")
    lags = value("hookgate_scheduler_fire_lag_seconds_count", job=SCHEDULE_JOB)
    lag_sum = value("hookgate_scheduler_fire_lag_seconds_sum", job=SCHEDULE_JOB)
    await setup.trigger("0 * * * *", DAY0)
    await setup.scheduler().run_once(DAY0 + 2 * SEC)
    assert value("hookgate_scheduler_plans_total", job=SCHEDULE_JOB, outcome="claimed") == claimed + 1
    assert value("hookgate_scheduler_fire_lag_seconds_count", job=SCHEDULE_JOB) == lags + 1
    assert value("hookgate_scheduler_fire_lag_seconds_sum", job=SCHEDULE_JOB) - lag_sum == 2.0


async def test_a_late_occurrence_is_counted_once_as_late_skipped(setup: Setup):  # noqa: F811
    skipped = value("hookgate_scheduler_plans_total", job=SCHEDULE_JOB, outcome="late_skipped")
    hourly = await setup.trigger("0 * * * *", DAY0)
    await setup.scheduler().run_once(DAY0 + SEC)
    late_at = utc(2027, 2, 1, 21, 5, 1)
    await setup.scheduler().run_once(late_at)
    await setup.scheduler().run_once(late_at + 10 * SEC)
    assert value("hookgate_scheduler_plans_total", job=SCHEDULE_JOB, outcome="late_skipped") == skipped + 1
    assert len(await setup.runs(hourly["id"])) == 1


async def test_a_failing_handler_counts_as_failed(setup: Setup, ctx):  # noqa: F811
    failed = value("hookgate_scheduler_plans_total", job=SCHEDULE_JOB, outcome="failed")
    await setup.trigger("* * * * *", DAY0)
    await break_run_inserts(ctx)  # every run insert fails, so the handler raises
    await setup.scheduler().run_once(DAY0 + SEC)
    assert value("hookgate_scheduler_plans_total", job=SCHEDULE_JOB, outcome="failed") == failed + 1
