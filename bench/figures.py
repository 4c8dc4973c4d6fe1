"""What several benches measure the same way: a latency percentile and a process's CPU time from ``/proc``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, 0 <= q <= 1); NaN when there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes have used so far (Linux ``/proc``; 0 for one that is gone)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")
