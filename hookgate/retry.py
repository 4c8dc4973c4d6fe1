"""Retry schedules: how long a failed push (or notification) waits before its next attempt.

A schedule is the list of delays between attempts, written ``5s,1m,5m,30m,2h,5h,10h,10h`` in settings
(``HOOKGATE_PUSH_RETRY_SCHEDULE``) and as a list of seconds on an agent (``retry_schedule``). ``n`` delays
allow ``n + 1`` attempts; each delay is jittered by ±10 % so that a backlog failed together does not come
back together. The default spreads nine attempts over about 28 hours: an agent may be down for a deploy, a
night or a bad day without a run being lost, as providers such as Stripe and Svix do for their own webhooks.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from hookgate.errors import HookgateError

DEFAULT = "5s,1m,5m,30m,2h,5h,10h,10h"
#: Each delay may be moved by up to this fraction either way.
JITTER = 0.10
#: A ``Retry-After`` asking for longer than this is cut to it.
RETRY_AFTER_CAP_S = 24 * 3600.0
#: Bounds of one schedule (and of an agent's override).
MAX_STEPS = 20
MAX_DELAY_S = 7 * 24 * 3600.0

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_STEP = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_RNG = random.Random()


class ScheduleError(HookgateError, ValueError):
    """A schedule that cannot be used; the message says which step and why."""


@dataclass(frozen=True)
class Schedule:
    """Delays (seconds) between attempts: after failed attempt ``n`` the next waits ``delays[n - 1]``."""

    delays: tuple[float, ...]

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """``"5s,1m,2h"`` (units s, m, h, d; a bare number is seconds) → a schedule (parsed once per text)."""
        return _parsed(text)

    @classmethod
    def _parse(cls, text: str) -> Schedule:
        values = []
        for step in text.split(","):
            match = _STEP.match(step)
            if match is None:
                raise ScheduleError(f"retry schedule step {step.strip()!r} is not a duration such as 30s, 5m or 2h")
            values.append(float(match[1]) * _UNITS[match[2]])
        return cls.of(values)

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Schedule:
        """A schedule from delays in seconds, checked: 1 to 20 steps, each above 0 and at most 7 days."""
        if not 1 <= len(seconds) <= MAX_STEPS:
            raise ScheduleError(f"a retry schedule has 1 to {MAX_STEPS} delays, not {len(seconds)}")
        for value in seconds:
            if not 0 < value <= MAX_DELAY_S:
                raise ScheduleError(f"retry delay {value:g}s is out of range: above 0 and at most 7 days")
        return cls(tuple(float(v) for v in seconds))

    @property
    def attempts(self) -> int:
        """Attempts a task gets under this schedule: one more than its delays."""
        return len(self.delays) + 1

    def delay(self, attempt: int, rng: random.Random | None = None) -> float | None:
        """Seconds to wait after failed attempt ``attempt`` (1-based), jittered; None when none is left."""
        if attempt < 1:
            raise ValueError("attempts count from 1")
        if attempt > len(self.delays):
            return None
        return self.delays[attempt - 1] * (1.0 + (rng or _RNG).uniform(-JITTER, JITTER))

    def text(self) -> str:
        """The schedule written back in the settings' notation (``5s,1m,2h``)."""
        return ",".join(_short(v) for v in self.delays)


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> Schedule:
    """A schedule is immutable: the settings' text (read on every dispatch pass) is parsed once."""
    return Schedule._parse(text)


def hinted(retry_after_s: float | None, scheduled: float) -> float:
    """The wait before the next attempt: the agent's ``Retry-After`` (capped at 24 h) when it gave one."""
    return scheduled if retry_after_s is None else min(RETRY_AFTER_CAP_S, max(0.0, retry_after_s))


def _short(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
