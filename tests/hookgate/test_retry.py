"""Retry schedules: parsing, bounds, jitter and the Retry-After cap."""

import random

import pytest

from hookgate import retry
from hookgate.retry import Schedule, ScheduleError


def test_the_default_schedule_gives_nine_attempts_over_about_28_hours():
    schedule = Schedule.parse(retry.DEFAULT)
    assert schedule.delays == (5, 60, 300, 1800, 7200, 18000, 36000, 36000)
    assert schedule.attempts == 9
    assert 27.5 * 3600 < sum(schedule.delays) < 28.5 * 3600
    assert schedule.text() == retry.DEFAULT


@pytest.mark.parametrize("text", ["", "5s,", "5x", "-1s", "0s", "8d", ",".join(["1s"] * 21), "1m;2m"])
def test_a_bad_schedule_is_refused_naming_the_problem(text):
    with pytest.raises(ScheduleError):
        Schedule.parse(text)


def test_units_and_bare_seconds():
    assert Schedule.parse(" 30 , 1.5m ,2h, 1d").delays == (30, 90, 7200, 86400)


def test_each_delay_is_jittered_within_ten_percent_and_none_is_left_after_the_last():
    schedule = Schedule.of([100, 1000])
    rng = random.Random(7)
    firsts = [schedule.delay(1, rng) for _ in range(500)]
    assert all(90 <= d <= 110 for d in firsts) and max(firsts) - min(firsts) > 10
    assert 900 <= schedule.delay(2, rng) <= 1100
    assert schedule.delay(3, rng) is None


def test_retry_after_is_honoured_up_to_a_day():
    assert retry.hinted(None, 42.0) == 42.0
    assert retry.hinted(120.0, 42.0) == 120.0
    assert retry.hinted(10 * 86400.0, 42.0) == retry.RETRY_AFTER_CAP_S
