"""The overview's charts, drawn on the server as inline SVG: no script, no external asset.

Deliveries per minute by outcome (stacked bars per 10-minute bucket, each bar the bucket's average rate)
and push latency p50/p99 (lines per bucket) over the last 24 hours. Push latency is not recorded in the
database, so it is derived from http agents' task rows: ``finished_at - started_at``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

BUCKET_S = 600
BUCKETS = 24 * 3600 // BUCKET_S
WIDTH, HEIGHT, LEFT, BOTTOM = 720, 180, 44, 20
OUTCOMES = ("dispatched", "queued", "ignored", "failed", "rejected")
COLOURS = {"dispatched": "#2f7d4f", "queued": "#4c7bd9", "ignored": "#9aa3b2", "failed": "#c2410c",
           "rejected": "#a3001b", "p50": "#4c7bd9", "p99": "#c2410c"}


@dataclass
class Chart:
    """Shapes in SVG user units (``0 0 WIDTH HEIGHT``), a y-axis scale and a legend, ready for the template."""

    title: str
    unit: str
    top: float
    bars: list[dict[str, Any]] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    ticks: list[dict[str, Any]] = field(default_factory=list)
    empty: bool = True
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: int = BOTTOM


def _start(now: datetime) -> datetime:
    """The first bucket of the 24 hours ending at ``now`` (buckets align to multiples of BUCKET_S)."""
    epoch = int(now.timestamp()) // BUCKET_S * BUCKET_S
    return datetime.fromtimestamp(epoch, UTC) - timedelta(seconds=BUCKET_S * (BUCKETS - 1))


def _index(start: datetime, bucket: datetime) -> int | None:
    i = int((bucket - start).total_seconds()) // BUCKET_S
    return i if 0 <= i < BUCKETS else None


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top``."""
    for step in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 100_000, 1_000_000):
        if top <= step:
            return float(step)
    return top


def _x(i: int) -> float:
    return LEFT + i * (WIDTH - LEFT) / BUCKETS


def _y(value: float, top: float) -> float:
    return (HEIGHT - BOTTOM) * (1 - value / top)


def _hour_ticks(chart: Chart, start: datetime) -> None:
    for i in range(BUCKETS):
        at = start + timedelta(seconds=i * BUCKET_S)
        if at.minute == 0 and at.hour % 4 == 0:
            chart.ticks.append({"x": round(_x(i), 1), "label": at.strftime("%H:%M")})


def deliveries(rows: Sequence[Any], now: datetime) -> Chart:
    """Stacked bars: deliveries per minute by outcome, from ``(bucket, status, n)`` rows."""
    start = _start(now)
    per: dict[int, dict[str, float]] = {}
    for row in rows:
        i = _index(start, row["bucket"])
        if i is not None:
            per.setdefault(i, {})[row["status"]] = row["n"] / (BUCKET_S / 60)
    top = _nice(max((sum(v.values()) for v in per.values()), default=1.0))
    chart = Chart("Deliveries per minute by outcome (10-minute averages, last 24 h)", "/min", top,
                  legend=[(o, COLOURS[o]) for o in OUTCOMES], empty=not per)
    bar = (WIDTH - LEFT) / BUCKETS - 1
    for i, counts in sorted(per.items()):
        base = 0.0
        for outcome in OUTCOMES:
            value = counts.get(outcome, 0.0)
            if value:
                y = _y(base + value, top)
                chart.bars.append({"x": round(_x(i), 1), "y": round(y, 1), "w": round(bar, 1),
                                   "h": round(_y(base, top) - y, 1), "colour": COLOURS[outcome],
                                   "label": f"{outcome}: {value:.2f}/min"})
                base += value
    _hour_ticks(chart, start)
    return chart


def latency(rows: Sequence[Any], now: datetime) -> Chart:
    """Two lines, p50 and p99 push latency in seconds, from ``(bucket, p50, p99, n)`` rows."""
    start = _start(now)
    points = [(i, row) for row in rows if (i := _index(start, row["bucket"])) is not None]
    top = _nice(max((row["p99"] for _, row in points), default=1.0))
    chart = Chart("Push latency p50 / p99 in seconds (task start to finish, 10-minute buckets, last 24 h)",
                  "s", top, legend=[("p50", COLOURS["p50"]), ("p99", COLOURS["p99"])], empty=not points)
    half = (WIDTH - LEFT) / BUCKETS / 2
    for name in ("p50", "p99"):
        coords = [(round(_x(i) + half, 1), round(_y(row[name], top), 1), f"{row[name]:.3f} s ({row['n']} pushes)")
                  for i, row in points]
        chart.lines.append({"name": name, "colour": COLOURS[name],
                            "points": " ".join(f"{x},{y}" for x, y, _ in coords),
                            "dots": [{"x": x, "y": y, "label": f"{name} {label}"} for x, y, label in coords]})
    _hour_ticks(chart, start)
    return chart
