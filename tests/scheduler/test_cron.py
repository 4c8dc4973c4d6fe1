"""Cron evaluation: validation, bounds, DST rules against explicit UTC lists, and an independent oracle."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler.cron import InvalidSchedule, Schedule, latest_only


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def utcs(*texts: str) -> list[datetime]:
    return [utc(text) for text in texts]


def occurrences(cron: str, zone: str, after: str, until: str) -> list[datetime]:
    return Schedule.parse(cron, zone).occurrences(utc(after), utc(until), 1000)


# --- parsing and validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "fragment"),
    [
        ("61 * * * *", "minute field '61'"),
        ("0 24 * * *", "hour field '24'"),
        ("0 0 0 * *", "day-of-month field '0'"),
        ("0 0 * 13 *", "month field '13'"),
        ("0 0 * * 8", "day-of-week field '8'"),
        ("*/0 * * * *", "minute field '*/0'"),
        ("lunch * * * *", "minute field 'lunch'"),
        ("* * * *", "5 fields"),
        ("", "5 fields"),
        ("0 0 1 1 * 2030", "5 fields"),
        ("0 * * * * *", "seconds field is not supported"),
        ("@reboot", "@reboot has no time of day"),
        ("@every 5m", "unknown alias '@every"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6 *", "never fires"),
    ],
)
def test_parse_refuses_bad_cron_with_a_message_naming_the_problem(cron: str, fragment: str) -> None:
    with pytest.raises(InvalidSchedule, match=fragment.replace("*", r"\*")):
        Schedule.parse(cron)


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus_Mons", "europe/berlin", "", " UTC", "../etc/passwd", "localtime"]
)
def test_parse_refuses_unknown_time_zone(zone: str) -> None:
    with pytest.raises(InvalidSchedule, match="unknown time zone"):
        Schedule.parse("0 * * * *", zone)


def test_invalid_schedule_is_a_value_error_and_direct_construction_validates() -> None:
    assert issubclass(InvalidSchedule, ValueError)
    with pytest.raises(InvalidSchedule):
        Schedule("0 25 * * *")


def test_parse_normalises_whitespace_and_defaults_to_utc() -> None:
    schedule = Schedule.parse("  0   9 * *\t1-5 ")
    assert schedule == Schedule("0 9 * * 1-5", "UTC")


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("@hourly", "2026-05-17 13:00"),
        ("@daily", "2026-05-18 00:00"),
        ("@midnight", "2026-05-18 00:00"),
        ("@weekly", "2026-05-24 00:00"),
        ("@monthly", "2026-06-01 00:00"),
        ("@yearly", "2027-01-01 00:00"),
        ("@annually", "2027-01-01 00:00"),
        ("@HOURLY", "2026-05-17 13:00"),
    ],
)
def test_standard_aliases_are_accepted(alias: str, expected: str) -> None:
    assert Schedule.parse(alias).next_after(utc("2026-05-17 12:34")) == utc(expected)


def test_feb_29_only_schedule_is_valid_and_waits_for_a_leap_year() -> None:
    assert Schedule.parse("0 12 29 2 *").next_after(utc("2026-03-01 00:00")) == utc("2028-02-29 12:00")


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Schedule.parse("* * * * *").next_after(datetime(2026, 1, 1))


# --- next_after and occurrences -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [
        ("0 0 1 * *", "UTC", "2026-12-15 10:00", "2027-01-01 00:00"),
        ("59 23 31 12 *", "UTC", "2026-12-31 23:59", "2027-12-31 23:59"),
        ("0 0 31 * *", "UTC", "2026-04-01 00:00", "2026-05-31 00:00"),
        ("0 0 1 1 *", "Asia/Tokyo", "2026-06-01 00:00", "2026-12-31 15:00"),
        ("30 23 31 12 *", "America/New_York", "2026-12-31 12:00", "2027-01-01 04:30"),
        ("0 9 * * 1-5", "Europe/Berlin", "2026-05-01 08:00", "2026-05-04 07:00"),
    ],
)
def test_next_after_crosses_month_and_year_ends(cron: str, zone: str, after: str, expected: str) -> None:
    assert Schedule.parse(cron, zone).next_after(utc(after)) == utc(expected)


def test_next_after_is_strictly_after_and_ignores_seconds_before_the_minute() -> None:
    schedule = Schedule.parse("0 * * * *")
    assert schedule.next_after(utc("2026-05-17 12:00")) == utc("2026-05-17 13:00")
    assert schedule.next_after(utc("2026-05-17 11:59:59.999999")) == utc("2026-05-17 12:00")


def test_next_after_returns_utc_for_other_aware_inputs() -> None:
    after = datetime(2026, 5, 17, 14, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    found = Schedule.parse("30 * * * *").next_after(after)
    assert found == utc("2026-05-17 12:30") and found.tzinfo is UTC


def test_next_after_raises_when_the_calendar_runs_out() -> None:
    with pytest.raises(ValueError, match="no occurrence"):
        Schedule.parse("0 0 1 1 *").next_after(utc("9999-06-01 00:00"))


def test_occurrences_excludes_after_and_includes_until() -> None:
    found = occurrences("0 * * * *", "UTC", "2026-05-17 10:00", "2026-05-17 12:00")
    assert found == utcs("2026-05-17 11:00", "2026-05-17 12:00")


def test_occurrences_returns_the_earliest_up_to_limit() -> None:
    schedule = Schedule.parse("*/15 * * * *")
    found = schedule.occurrences(utc("2026-05-17 10:00"), utc("2026-05-18 10:00"), 3)
    assert found == utcs("2026-05-17 10:15", "2026-05-17 10:30", "2026-05-17 10:45")
    assert schedule.occurrences(utc("2026-05-17 10:00"), utc("2026-05-18 10:00"), 0) == []


def test_occurrences_of_an_empty_or_inverted_window_is_empty() -> None:
    assert occurrences("* * * * *", "UTC", "2026-05-17 10:00", "2026-05-17 10:00") == []
    assert occurrences("* * * * *", "UTC", "2026-05-17 10:00", "2026-05-17 09:00") == []
    assert occurrences("0 * * * *", "UTC", "2026-05-17 10:00", "2026-05-17 10:59:59") == []


def test_occurrences_refuses_a_negative_limit() -> None:
    with pytest.raises(ValueError, match="limit"):
        Schedule.parse("* * * * *").occurrences(utc("2026-05-17 10:00"), utc("2026-05-17 11:00"), -1)


def test_latest_in_includes_until_and_excludes_after() -> None:
    schedule = Schedule.parse("0 * * * *")
    assert schedule.latest_in(utc("2026-05-17 09:00"), utc("2026-05-17 12:00")) == utc("2026-05-17 12:00")
    assert schedule.latest_in(utc("2026-05-17 12:00"), utc("2026-05-17 12:59")) is None
    assert schedule.latest_in(utc("2026-05-17 11:00"), utc("2026-05-17 11:59:59")) is None


@pytest.mark.timeout(5)
def test_latest_in_steps_back_instead_of_enumerating() -> None:
    # 50 years of a per-minute cron is 26 million occurrences; enumerating would blow the timeout.
    schedule = Schedule.parse("* * * * *", "Europe/Berlin")
    assert schedule.latest_in(utc("1990-01-01 00:00"), utc("2040-01-01 00:00:30")) == utc("2040-01-01 00:00")
    yearly = Schedule.parse("0 0 1 1 *")
    assert yearly.latest_in(utc("2026-05-16 00:00"), utc("2026-05-17 00:00")) is None


def test_preview_pairs_utc_with_local_wall_time_in_the_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    pairs = Schedule.parse("0 9 * * *", "Europe/Berlin").preview(3, utc("2026-03-27 12:00"))
    assert [utc_time for utc_time, _ in pairs] == utcs(
        "2026-03-28 08:00", "2026-03-29 07:00", "2026-03-30 07:00"
    )
    assert [local.isoformat() for _, local in pairs] == [
        "2026-03-28T09:00:00+01:00",
        "2026-03-29T09:00:00+02:00",
        "2026-03-30T09:00:00+02:00",
    ]
    assert all(local.tzinfo == berlin for _, local in pairs)


def test_preview_marks_the_second_instance_of_a_repeated_hour_with_fold() -> None:
    pairs = Schedule.parse("0 * * * *", "America/New_York").preview(2, utc("2026-11-01 04:30"))
    assert [(u, local.isoformat(), local.fold) for u, local in pairs] == [
        (utc("2026-11-01 05:00"), "2026-11-01T01:00:00-04:00", 0),
        (utc("2026-11-01 06:00"), "2026-11-01T01:00:00-05:00", 1),
    ]


# --- DST: skipped wall time (spring forward) ----------------------------------------------------


def test_fixed_time_in_berlin_gap_fires_once_at_the_end_of_the_gap() -> None:
    # 2026-03-29 02:00 CET jumps to 03:00 CEST (01:00Z); 02:30 does not exist that day.
    found = occurrences("30 2 * * *", "Europe/Berlin", "2026-03-27 12:00", "2026-03-30 12:00")
    assert found == utcs("2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30")


def test_fixed_time_in_new_york_gap_fires_once_at_the_end_of_the_gap() -> None:
    # 2026-03-08 02:00 EST jumps to 03:00 EDT (07:00Z).
    found = occurrences("30 2 * * *", "America/New_York", "2026-03-06 12:00", "2026-03-09 12:00")
    assert found == utcs("2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30")


def test_several_fixed_times_in_a_gap_and_the_gap_end_itself_fire_once() -> None:
    found = occurrences("0,30 2,3 * * *", "Europe/Berlin", "2026-03-28 23:00", "2026-03-29 03:00")
    assert found == utcs("2026-03-29 01:00", "2026-03-29 01:30")


def test_hourly_across_spring_forward_fires_every_real_hour() -> None:
    found = occurrences("0 * * * *", "America/New_York", "2026-03-08 04:30", "2026-03-08 09:30")
    assert found == utcs(
        "2026-03-08 05:00", "2026-03-08 06:00", "2026-03-08 07:00", "2026-03-08 08:00", "2026-03-08 09:00"
    )


def test_interval_cron_skips_the_gap_rather_than_firing_early_at_its_end() -> None:
    # 02:05 does not exist; firing it at 03:00 EDT would put two runs five minutes apart.
    found = occurrences("5 * * * *", "America/New_York", "2026-03-08 05:30", "2026-03-08 08:30")
    assert found == utcs("2026-03-08 06:05", "2026-03-08 07:05", "2026-03-08 08:05")


def test_quarter_hourly_across_spring_forward_is_evenly_spaced() -> None:
    found = occurrences("*/15 * * * *", "Europe/Berlin", "2026-03-29 00:20", "2026-03-29 01:40")
    assert found == utcs(
        "2026-03-29 00:30", "2026-03-29 00:45", "2026-03-29 01:00", "2026-03-29 01:15", "2026-03-29 01:30"
    )


def test_latest_in_finds_a_gap_end_occurrence() -> None:
    schedule = Schedule.parse("30 2 * * *", "Europe/Berlin")
    assert schedule.latest_in(utc("2026-03-28 12:00"), utc("2026-03-29 01:10")) == utc("2026-03-29 01:00")


# --- DST: repeated wall time (fall back) --------------------------------------------------------


def test_fixed_time_in_new_york_repeated_hour_fires_once_at_the_first_instance() -> None:
    # 2026-11-01 02:00 EDT falls back to 01:00 EST (06:00Z); 01:30 happens at 05:30Z and 06:30Z.
    found = occurrences("30 1 * * *", "America/New_York", "2026-10-31 00:00", "2026-11-02 12:00")
    assert found == utcs("2026-10-31 05:30", "2026-11-01 05:30", "2026-11-02 06:30")


def test_fixed_time_in_berlin_repeated_hour_fires_once_at_the_first_instance() -> None:
    # 2026-10-25 03:00 CEST falls back to 02:00 CET (01:00Z); 02:30 happens at 00:30Z and 01:30Z.
    found = occurrences("30 2 * * *", "Europe/Berlin", "2026-10-23 12:00", "2026-10-26 12:00")
    assert found == utcs("2026-10-24 00:30", "2026-10-25 00:30", "2026-10-26 01:30")


def test_latest_in_never_returns_the_second_instance_of_a_fixed_time() -> None:
    # croniter's get_prev answers 06:30Z here, disagreeing with its own get_next.
    schedule = Schedule.parse("30 1 * * *", "America/New_York")
    assert schedule.latest_in(utc("2026-11-01 05:45"), utc("2026-11-01 07:00")) is None
    assert schedule.latest_in(utc("2026-11-01 05:00"), utc("2026-11-01 07:00")) == utc("2026-11-01 05:30")


def test_next_after_from_inside_the_repeated_hour_skips_the_second_instance() -> None:
    schedule = Schedule.parse("30 1 * * *", "America/New_York")
    assert schedule.next_after(utc("2026-11-01 05:45")) == utc("2026-11-02 06:30")


def test_hourly_across_fall_back_fires_in_both_utc_hours() -> None:
    found = occurrences("0 * * * *", "America/New_York", "2026-11-01 03:30", "2026-11-01 09:30")
    assert found == utcs(
        "2026-11-01 04:00",
        "2026-11-01 05:00",  # 01:00 EDT
        "2026-11-01 06:00",  # 01:00 EST
        "2026-11-01 07:00",
        "2026-11-01 08:00",
        "2026-11-01 09:00",
    )


def test_quarter_hourly_across_fall_back_is_evenly_spaced() -> None:
    found = occurrences("*/15 * * * *", "Europe/Berlin", "2026-10-24 23:40", "2026-10-25 02:10")
    expected = [utc("2026-10-24 23:45") + timedelta(minutes=15 * i) for i in range(10)]
    assert found == expected


def test_interval_cron_from_inside_the_repeated_hour_sees_the_second_pass() -> None:
    # From 01:40 EDT (05:40Z) the next "*/15" is 01:45 EDT, then 01:00 EST: never a jump of an hour.
    schedule = Schedule.parse("*/15 * * * *", "America/New_York")
    assert schedule.occurrences(utc("2026-11-01 05:40"), utc("2026-11-01 06:20"), 10) == utcs(
        "2026-11-01 05:45", "2026-11-01 06:00", "2026-11-01 06:15"
    )
    assert schedule.latest_in(utc("2026-11-01 05:40"), utc("2026-11-01 06:10")) == utc("2026-11-01 06:00")


# --- DST: zones with unusual shifts -------------------------------------------------------------


def test_lord_howe_half_hour_fall_back() -> None:
    # 2026-04-05 02:00 +11 falls back to 01:30 +10:30 (2026-04-04 15:00Z).
    quarter = occurrences("*/15 * * * *", "Australia/Lord_Howe", "2026-04-04 14:10", "2026-04-04 15:40")
    assert quarter == [utc("2026-04-04 14:15") + timedelta(minutes=15 * i) for i in range(6)]
    fixed = occurrences("45 1 * * *", "Australia/Lord_Howe", "2026-04-03 00:00", "2026-04-05 23:00")
    assert fixed == utcs("2026-04-03 14:45", "2026-04-04 14:45", "2026-04-05 15:15")


def test_lord_howe_half_hour_spring_forward() -> None:
    # 2026-10-04 02:00 +10:30 jumps to 02:30 +11 (2026-10-03 15:30Z).
    fixed = occurrences("15 2 * * *", "Australia/Lord_Howe", "2026-10-02 00:00", "2026-10-04 23:00")
    assert fixed == utcs("2026-10-02 15:45", "2026-10-03 15:30", "2026-10-04 15:15")
    quarter = occurrences("*/15 * * * *", "Australia/Lord_Howe", "2026-10-03 15:00", "2026-10-03 15:50")
    assert quarter == utcs("2026-10-03 15:15", "2026-10-03 15:30", "2026-10-03 15:45")


def test_troll_two_hour_fall_back_fires_a_fixed_time_once() -> None:
    # Antarctica/Troll: 2026-10-25 03:00 +02 falls back to 01:00 +00 (01:00Z); 01:00-03:00 repeats.
    fixed = occurrences("30 1 * * *", "Antarctica/Troll", "2026-10-24 12:00", "2026-10-26 12:00")
    assert fixed == utcs("2026-10-24 23:30", "2026-10-26 01:30")
    schedule = Schedule.parse("0 * * * *", "Antarctica/Troll")
    hourly = schedule.occurrences(utc("2026-10-24 23:30"), utc("2026-10-25 03:30"), 10)
    assert hourly == [utc("2026-10-25 00:00") + timedelta(hours=i) for i in range(4)]


# --- latest_only catch-up -----------------------------------------------------------------------


def test_latest_only_after_six_hours_down_fires_only_the_newest_if_on_time() -> None:
    schedule = Schedule.parse("*/10 * * * *")
    newest = latest_only(schedule, utc("2026-05-17 00:00"), utc("2026-05-17 06:03"))
    assert newest == utc("2026-05-17 06:00")


def test_latest_only_after_six_hours_down_fires_nothing_when_the_newest_is_stale() -> None:
    schedule = Schedule.parse("0 * * * *")
    assert latest_only(schedule, utc("2026-05-17 00:00"), utc("2026-05-17 06:07")) is None


def test_latest_only_keeps_an_occurrence_exactly_late_after_old() -> None:
    schedule = Schedule.parse("0 * * * *")
    assert latest_only(schedule, utc("2026-05-17 05:00"), utc("2026-05-17 06:05")) == utc("2026-05-17 06:00")
    assert latest_only(schedule, utc("2026-05-17 05:00"), utc("2026-05-17 06:05:00.000001")) is None


def test_latest_only_never_replans_the_last_plan() -> None:
    schedule = Schedule.parse("0 * * * *")
    assert latest_only(schedule, utc("2026-05-17 06:00"), utc("2026-05-17 06:02")) is None


def test_latest_only_honours_a_custom_late_after() -> None:
    schedule = Schedule.parse("0 * * * *")
    now = utc("2026-05-17 06:40")
    assert latest_only(schedule, utc("2026-05-17 00:00"), now) is None
    assert latest_only(schedule, utc("2026-05-17 00:00"), now, late_after=timedelta(hours=1)) == utc(
        "2026-05-17 06:00"
    )


def test_latest_only_cold_start_anchors_on_the_anchor() -> None:
    schedule = Schedule.parse("0 * * * *")
    now = utc("2026-05-17 06:02")
    assert latest_only(schedule, None, now, anchor=utc("2026-05-17 05:58")) == utc("2026-05-17 06:00")
    assert latest_only(schedule, None, now, anchor=utc("2026-05-17 06:00")) is None
    assert latest_only(schedule, None, now) == utc("2026-05-17 06:00")


def test_latest_only_prefers_last_plan_over_anchor() -> None:
    schedule = Schedule.parse("0 * * * *")
    now = utc("2026-05-17 06:02")
    assert latest_only(schedule, utc("2026-05-17 06:00"), now, anchor=utc("2026-05-17 05:00")) is None


def test_latest_only_never_looks_back_past_the_window() -> None:
    monthly = Schedule.parse("0 0 1 * *")
    now, month = utc("2026-05-11 00:00"), timedelta(days=30)
    assert latest_only(monthly, utc("2026-04-20 00:00"), now, late_after=month) is None
    found = latest_only(monthly, utc("2026-04-20 00:00"), now, late_after=month, window=month)
    assert found == utc("2026-05-01 00:00")


def test_latest_only_does_not_refire_a_fixed_time_in_the_repeated_hour() -> None:
    schedule = Schedule.parse("30 1 * * *", "America/New_York")
    assert latest_only(schedule, utc("2026-11-01 05:30"), utc("2026-11-01 06:32")) is None


# --- properties against an independent oracle ---------------------------------------------------

MINUTES = ["*", "*/15", "*/7", "0", "5", "30", "45", "0,30", "10-20/5"]
HOURS = ["*", "*/2", "*/3", "0", "1", "2", "3", "1,2", "0-3", "22"]
DAYS = ["*", "*", "*", "*", "1", "4", "25"]
WEEKDAYS = ["*", "*", "*", "*", "0", "1-5", "6"]
TRANSITIONS = {
    "UTC": ["2026-06-01 00:00"],
    "Asia/Kolkata": ["2026-12-31 18:30"],
    "Europe/Berlin": ["2026-03-29 01:00", "2026-10-25 01:00"],
    "America/New_York": ["2026-03-08 07:00", "2026-11-01 06:00"],
    "Australia/Lord_Howe": ["2026-04-04 15:00", "2026-10-03 15:30"],
    "Antarctica/Troll": ["2026-03-29 01:00", "2026-10-25 01:00"],
}


def _field(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        first, _, last = span.partition("-")
        lo, hi = (low, high) if span == "*" else (int(first), int(last or first))
        values.update(range(lo, hi + 1, int(step or 1)))
    return values


def _matches(fields: list[str], wall: datetime) -> bool:
    minute, hour, day, _month, weekday = fields
    day_ok = wall.day in _field(day, 1, 31)
    weekday_ok = (wall.weekday() + 1) % 7 in _field(weekday, 0, 6)
    days_ok = (day_ok or weekday_ok) if "*" not in (day, weekday) else (day_ok and weekday_ok)
    return wall.minute in _field(minute, 0, 59) and wall.hour in _field(hour, 0, 23) and days_ok


def _offset_at(t: datetime, zone: ZoneInfo) -> timedelta:
    return t.astimezone(zone).replace(tzinfo=None) - t.replace(tzinfo=None)


def oracle(cron: str, zone_name: str, after: datetime, until: datetime) -> list[datetime]:
    """Scan every UTC minute and apply the documented DST rules to the wall clock directly."""
    zone, fields = ZoneInfo(zone_name), cron.split()
    interval = fields[0].startswith("*") or fields[1].startswith("*")
    t = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    found = []
    while t <= until:
        local = t.astimezone(zone)
        wall = local.replace(tzinfo=None)
        jump = _offset_at(t, zone) - _offset_at(t - timedelta(minutes=1), zone)  # > 0 right after a gap
        skipped = [wall - timedelta(minutes=m) for m in range(1, jump // timedelta(minutes=1) + 1)]
        if _matches(fields, wall) and (interval or local.fold == 0):
            found.append(t)
        elif not interval and any(_matches(fields, wall) for wall in skipped):
            found.append(t)
        t += timedelta(minutes=1)
    return found


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    cron = " ".join(draw(st.sampled_from(f)) for f in (MINUTES, HOURS, DAYS, ["*"], WEEKDAYS))
    zone = draw(st.sampled_from(sorted(TRANSITIONS)))
    base = utc(draw(st.sampled_from(TRANSITIONS[zone])))
    after = base + timedelta(seconds=draw(st.integers(-14 * 3600, 2 * 3600)))  # mostly spans the transition
    until = after + timedelta(seconds=draw(st.integers(0, 16 * 3600)))
    return cron, zone, after, until


@settings(max_examples=300, deadline=None)
@given(cases())
@example(("5 * * * *", "America/New_York", utc("2026-03-08 05:30"), utc("2026-03-08 08:30")))
@example(("* 2 * * *", "Europe/Berlin", utc("2026-03-28 23:30"), utc("2026-03-29 01:30")))
@example(("45 1 * * *", "Australia/Lord_Howe", utc("2026-04-04 14:00"), utc("2026-04-04 16:00")))
@example(("*/7 1,2 * * *", "Antarctica/Troll", utc("2026-10-24 22:30:30"), utc("2026-10-25 03:30")))
def test_occurrences_match_a_minute_by_minute_oracle(case: tuple[str, str, datetime, datetime]) -> None:
    cron, zone, after, until = case
    assert Schedule.parse(cron, zone).occurrences(after, until, 10_000) == oracle(cron, zone, after, until)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_latest_in_is_the_last_of_occurrences(case: tuple[str, str, datetime, datetime]) -> None:
    cron, zone, after, until = case
    schedule = Schedule.parse(cron, zone)
    found = schedule.occurrences(after, until, 10_000)
    assert schedule.latest_in(after, until) == (found[-1] if found else None)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_next_after_is_the_first_of_occurrences(case: tuple[str, str, datetime, datetime]) -> None:
    cron, zone, after, until = case
    schedule = Schedule.parse(cron, zone)
    found = schedule.occurrences(after, until, 1)
    if found:
        assert schedule.next_after(after) == found[0]
    else:
        assert schedule.next_after(after) > until


@settings(max_examples=200, deadline=None)
@given(cases(), st.integers(0, 20 * 60))
def test_latest_only_returns_the_newest_on_time_occurrence_or_nothing(
    case: tuple[str, str, datetime, datetime], late_minutes: int
) -> None:
    cron, zone, last_plan, now = case
    late_after = timedelta(minutes=late_minutes)
    schedule = Schedule.parse(cron, zone)
    found = schedule.occurrences(last_plan, now, 10_000)
    newest = found[-1] if found and now - found[-1] <= late_after else None
    assert latest_only(schedule, last_plan, now, late_after=late_after) == newest
