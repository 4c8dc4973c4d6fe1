import random
from datetime import timedelta

import pytest

from scheduler.cron import Schedule
from scheduler.jobs import autopilot_schedule_job
from scheduler.spec import CustomPlans, Every, EveryPlan, InvalidJobSpec, JobSpec, LatestOnly
from tests.scheduler.conftest import utc

MIN = timedelta(minutes=1)


async def _noop(batch):
    return None


async def _plans(conn, now, limit, scan):
    return []


async def _due(conn, now):
    return None


def spec(**kw):
    values = {"name": "job", "handler": _noop, "cadence": Every(MIN)}
    return JobSpec(**(values | kw))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("run_timeout", timedelta(minutes=5), "run_timeout must be shorter than stale_timeout"),
    ("run_timeout", timedelta(minutes=6), "run_timeout must be shorter than stale_timeout"),
    ("heartbeat", timedelta(minutes=5), "heartbeat must be shorter than stale_timeout"),
    ("heartbeat", timedelta(minutes=7), "heartbeat must be shorter than stale_timeout"),
    ("heartbeat", timedelta(0), "heartbeat must be positive"),
    ("max_attempts", 0, "max_attempts must be at least 1"),
    ("retry_backoff", (), "retry_backoff must name at least one delay"),
    ("retry_jitter", 1.5, "retry_jitter must be between 0 and 1"),
    ("max_plans_per_tick", 0, "must be at least 1"),
    ("name", "", "name must be"),
    ("name", "has space", "name must be"),
    ("schedule_delay", -MIN, "schedule_delay must not be negative"),
])
def test_job_spec_refuses_settings_that_cannot_work(field, value, message):
    with pytest.raises(InvalidJobSpec, match=message):
        spec(**{field: value})


def test_job_spec_refuses_timeouts_that_would_let_a_healthy_holder_be_robbed():
    with pytest.raises(InvalidJobSpec):
        spec(stale_timeout=timedelta(seconds=30), heartbeat=timedelta(seconds=30), run_timeout=timedelta(seconds=10))
    ok = spec(stale_timeout=timedelta(seconds=31), heartbeat=timedelta(seconds=30), run_timeout=timedelta(seconds=30))
    assert ok.stale_timeout > ok.run_timeout


def test_catch_up_modes_are_validated():
    with pytest.raises(InvalidJobSpec, match="cadence is required"):
        JobSpec(name="job", handler=_noop)
    with pytest.raises(InvalidJobSpec, match="replaces cadence"):
        spec(catch_up=CustomPlans(_plans, _due))
    with pytest.raises(InvalidJobSpec, match="window must be positive"):
        spec(catch_up=EveryPlan(window=timedelta(0), max_per_tick=3))
    with pytest.raises(InvalidJobSpec, match="max_per_tick"):
        spec(catch_up=EveryPlan(window=MIN, max_per_tick=0))
    with pytest.raises(InvalidJobSpec, match="late_after must be positive"):
        spec(catch_up=LatestOnly(late_after=timedelta(0)))
    assert JobSpec(name="custom", handler=_noop, catch_up=CustomPlans(_plans, _due)).cadence is None
    assert spec(cadence=Schedule.parse("*/5 * * * *")).cadence is not None


async def _in_transaction(conn, batch):
    return None


def test_a_transactional_single_flight_job_needs_a_planner_that_locks_its_scopes():
    with pytest.raises(InvalidJobSpec, match="custom planner that locks its scopes"):
        spec(transactional=_in_transaction, single_flight=True)
    assert spec(transactional=_in_transaction).transactional is _in_transaction
    locked = JobSpec(name="custom", handler=_noop, catch_up=CustomPlans(_plans, _due), single_flight=True,
                     transactional=_in_transaction)
    assert locked.single_flight and locked.transactional is not None
    assert autopilot_schedule_job(heartbeat_timeout_s=120.0).transactional is not None


def test_retry_backoff_steps_with_bounded_jitter_and_stops_at_max_attempts():
    job = spec(max_attempts=4, retry_jitter=0.1)
    now = utc(2027, 1, 1)
    rng = random.Random(7)
    for attempt, base in ((1, 1), (2, 5), (3, 15)):
        for _ in range(50):
            delay = job.retry_at(attempt, now, rng) - now
            assert timedelta(minutes=base) <= delay <= timedelta(minutes=base) * 1.1
    assert job.retry_at(4, now) is None
    assert spec(max_attempts=1).retry_at(1, now) is None


def test_autopilot_schedule_job_has_the_design_parameters():
    job = autopilot_schedule_job(heartbeat_timeout_s=120.0)
    assert job.name == "autopilot_schedule_dispatch" and job.scope_kind == "trigger"
    assert (job.run_timeout, job.stale_timeout, job.heartbeat) == (2 * MIN, 5 * MIN, timedelta(seconds=30))
    assert job.stale_reentry and job.max_attempts == 3 and job.single_flight
    assert list(job.retry_backoff) == [MIN, 5 * MIN, 15 * MIN] and job.retry_jitter > 0
    assert job.max_plans_per_tick == 5
    assert isinstance(job.catch_up, CustomPlans)


def test_every_cadence_is_aligned_on_the_epoch():
    every = Every(timedelta(seconds=60))
    assert every.next_after(utc(2027, 1, 1, 0, 0, 30)) == utc(2027, 1, 1, 0, 1)
    assert every.latest_in(utc(2027, 1, 1), utc(2027, 1, 1, 0, 2, 59)) == utc(2027, 1, 1, 0, 2)
    assert every.latest_in(utc(2027, 1, 1, 0, 2), utc(2027, 1, 1, 0, 2, 59)) is None
    assert every.occurrences(utc(2027, 1, 1), utc(2027, 1, 1, 0, 10), 3) == [
        utc(2027, 1, 1, 0, 1), utc(2027, 1, 1, 0, 2), utc(2027, 1, 1, 0, 3)]
    with pytest.raises(InvalidJobSpec):
        Every(timedelta(0))
