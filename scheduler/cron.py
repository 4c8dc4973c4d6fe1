"""Cron schedules read as wall-clock time in an IANA zone; the one code path for scheduling and preview.

A schedule is a 5-field cron expression (or a standard alias such as ``@hourly``); every datetime in and
out is timezone-aware UTC. Daylight saving time follows Vixie cron. An *interval* expression (minute or
hour field starting with ``*``: ``0 * * * *``, ``*/15 * * * *``) runs on real elapsed time; any other
expression names *fixed* wall-clock times (``30 2 * * *``).

- Skipped wall time (spring forward): a fixed time inside the gap fires once, at the first instant after
  the gap (``30 2 * * *`` Europe/Berlin fires at 03:00 CEST on 2026-03-29); an interval expression has no
  occurrence inside the gap, so ``5 * * * *`` fires 01:05 EST then 03:05 EDT, one real hour apart.
- Repeated wall time (fall back): a fixed time fires once, at its first instance (``30 1 * * *``
  America/New_York fires at 01:30 EDT on 2026-11-01, not again at 01:30 EST); an interval expression fires
  at both instances, so ``0 * * * *`` still fires every real hour.
"""

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import islice, takewhile
from typing import NamedTuple, Self
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from hookgate.errors import HookgateError

_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MINUTE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)


class InvalidSchedule(HookgateError, ValueError):
    """A cron expression or time zone that cannot be scheduled; the message is shown to the user."""


@dataclass(frozen=True)
class Schedule:
    """A validated cron expression evaluated in an IANA time zone."""

    cron: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        _check_zone(self.timezone)
        _check_cron(self.cron)

    @classmethod
    def parse(cls, cron: str, timezone: str = "UTC") -> Self:
        """Normalise whitespace and validate; raises `InvalidSchedule` with a user-facing message."""
        return cls(" ".join(cron.split()), timezone)

    def next_after(self, after: datetime) -> datetime:
        """The first occurrence strictly after `after`."""
        found = next(self._stream(_utc(after), reverse=False), None)
        if found is None:
            raise ValueError(f"{self.cron!r} has no occurrence after {after.isoformat()}")
        return found

    def occurrences(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """The earliest `limit` occurrences in (after, until], ascending."""
        if limit < 0:
            raise ValueError("limit must not be negative")
        upto = _utc(until)
        stream = self._stream(_utc(after), reverse=False)
        return list(islice(takewhile(lambda t: t <= upto, stream), limit))

    def latest_in(self, after: datetime, until: datetime) -> datetime | None:
        """The newest occurrence in (after, until], found by stepping back from `until`."""
        newest = next(self._stream(_utc(until), reverse=True), None)
        return newest if newest is not None and newest > _utc(after) else None

    def preview(self, count: int, after: datetime) -> list[tuple[datetime, datetime]]:
        """The next `count` occurrences after `after` as (UTC, local wall-clock time in the zone) pairs."""
        zone = ZoneInfo(self.timezone)
        return [(t, t.astimezone(zone)) for t in islice(self._stream(_utc(after), reverse=False), count)]

    def _stream(self, bound: datetime, *, reverse: bool) -> Iterator[datetime]:
        """Occurrences after `bound` ascending, or at or before it newest first (`reverse`), no duplicates."""
        zone, fields = ZoneInfo(self.timezone), _expand(self.cron).split()
        interval = fields[0].startswith("*") or fields[1].startswith("*")
        local = bound.astimezone(zone).replace(tzinfo=None)
        # Across a repeated hour, wall times on the far side of `bound` have instants on its near side.
        margin = _fold_size(local, zone) + _MINUTE
        walls = _walls(" ".join(fields), local + (margin if reverse else -margin), reverse=reverse)
        return _merge((_resolve(wall, zone, interval) for wall in walls), bound, reverse)


def latest_only(
    schedule: Schedule,
    last_plan: datetime | None,
    now: datetime,
    *,
    late_after: timedelta = timedelta(minutes=5),
    window: timedelta = timedelta(hours=24),
    anchor: datetime | None = None,
) -> datetime | None:
    """ARCHITECTURE §8 latest-only catch-up: the newest occurrence in (max(last_plan or anchor, now - window), now].

    None when there is none or it is more than `late_after` old, so a restart never fires stale work.
    """
    now = _utc(now)
    since = last_plan if last_plan is not None else anchor
    floor = now - window if since is None else max(_utc(since), now - window)
    newest = schedule.latest_in(floor, now)
    return None if newest is None or now - newest > late_after else newest


class _Resolved(NamedTuple):
    """The instants a matching wall time fires at, and the first and last instants the clock shows it."""

    first: datetime
    last: datetime
    fires: tuple[datetime, ...]


def _merge(resolved: Iterator[_Resolved], bound: datetime, reverse: bool) -> Iterator[datetime]:
    """Instants of successive wall times in time order (a repeated hour interleaves them), deduplicated."""
    pending: list[tuple[timedelta, datetime]] = []
    emitted: datetime | None = None
    for res in resolved:
        for t in res.fires:
            if (t <= bound) if reverse else (t > bound):
                heapq.heappush(pending, (_key(t, reverse), t))
        # Later wall times cannot fire beyond this horizon, so what is pending up to it is final.
        horizon = _key(res.last if reverse else res.first, reverse)
        while pending and pending[0][0] <= horizon:
            t = heapq.heappop(pending)[1]
            if t != emitted:
                yield (emitted := t)
    for _, t in sorted(pending):
        if t != emitted:
            yield (emitted := t)


def _resolve(wall: datetime, zone: ZoneInfo, interval: bool) -> _Resolved:
    """Map a naive wall time that matches the cron to UTC instants, applying the module's DST rules."""
    early, late = _offset(wall, zone, 0), _offset(wall, zone, 1)
    if early == late:
        t = (wall - early).replace(tzinfo=UTC)
        return _Resolved(t, t, (t,))
    if early > late:  # repeated wall time: PEP 495 fold=0 is the first instance
        first, second = (wall - early).replace(tzinfo=UTC), (wall - late).replace(tzinfo=UTC)
        return _Resolved(first, second, (first, second) if interval else (first,))
    end = _gap_end(wall, zone, early, late)
    return _Resolved(end, end, () if interval else (end,))


def _gap_end(wall: datetime, zone: ZoneInfo, before: timedelta, after: timedelta) -> datetime:
    """The instant the clock jumps over the skipped naive `wall` (offsets `before` -> `after`)."""
    base = (wall - after).replace(tzinfo=UTC)  # still on the old offset; `wall - before` is past the jump
    lo, hi = 0, int((after - before) / _SECOND)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (base + mid * _SECOND).astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return base + hi * _SECOND


def _walls(expr: str, start: datetime, *, reverse: bool) -> Iterator[datetime]:
    """Naive wall times matching `expr` beyond `start`; croniter steps a UTC clock, so it sees no DST."""
    try:
        it = croniter(expr, start.replace(tzinfo=UTC), ret_type=datetime)
        step = it.get_prev if reverse else it.get_next
        while True:
            yield step(datetime).replace(tzinfo=None)
    except (ValueError, OverflowError):  # ran past year 1 or 9999
        return


def _offset(wall: datetime, zone: ZoneInfo, fold: int) -> timedelta:
    """The UTC offset of naive `wall` in `zone` for the given PEP 495 fold."""
    return wall.replace(tzinfo=zone, fold=fold).utcoffset() or timedelta(0)  # ZoneInfo always has one


def _fold_size(wall: datetime, zone: ZoneInfo) -> timedelta:
    """How far the clock falls back over naive `wall`; zero unless that wall time repeats."""
    return max(_offset(wall, zone, 0) - _offset(wall, zone, 1), timedelta(0))


def _key(t: datetime, reverse: bool) -> timedelta:
    """A heap key that pops `t` in stream order."""
    return _EPOCH - t if reverse else t - _EPOCH


def _utc(value: datetime) -> datetime:
    """`value` in UTC; naive datetimes are a programming error."""
    if value.utcoffset() is None:
        raise ValueError(f"datetime must be timezone-aware, got {value!r}")
    return value.astimezone(UTC)


def _expand(cron: str) -> str:
    """The 5-field form of `cron`, resolving a standard alias."""
    if not cron.startswith("@"):
        return cron
    if cron.lower() == "@reboot":
        raise InvalidSchedule("@reboot has no time of day; use a 5-field cron expression or an alias")
    try:
        return _ALIASES[cron.lower()]
    except KeyError:
        raise InvalidSchedule(f"unknown alias {cron!r}; use one of {', '.join(_ALIASES)}") from None


def _check_cron(cron: str) -> None:
    """Raise `InvalidSchedule` unless `cron` is a 5-field expression that fires at least once."""
    fields = _expand(cron).split()
    if len(fields) == 6:
        raise InvalidSchedule("a seconds field is not supported; use 5 fields: " + " ".join(_FIELDS))
    if len(fields) != 5:
        raise InvalidSchedule(f"a cron expression has 5 fields ({' '.join(_FIELDS)}), got {len(fields)}")
    for name, field in zip(_FIELDS, fields, strict=True):
        probe = " ".join(field if other == name else "*" for other in _FIELDS)
        if not croniter.is_valid(probe):
            raise InvalidSchedule(f"invalid {name} field {field!r} in cron expression {cron!r}")
    try:
        croniter(" ".join(fields), _EPOCH, ret_type=datetime).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidSchedule(f"cron expression {cron!r} never fires (no such date)") from None
    except CroniterError as exc:
        raise InvalidSchedule(f"invalid cron expression {cron!r}: {exc}") from None


def _check_zone(name: str) -> None:
    """Raise `InvalidSchedule` unless `name` is an IANA zone in the installed tz database."""
    if name not in _zones():
        raise InvalidSchedule(f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin'")


@cache
def _zones() -> frozenset[str]:
    """The IANA zone names available to zoneinfo, read once."""
    # "localtime" is the host's zone, which would differ between replicas.
    return frozenset(available_timezones()) - {"localtime"}
