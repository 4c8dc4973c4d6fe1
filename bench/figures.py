"""What several benches measure the same way: percentiles, CPU time, the statements a database spent time in.

A latency percentile, a process's CPU time from ``/proc``, and the top of ``pg_stat_statements``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


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


async def top_statements(conn: Any, limit: int) -> list[Any]:
    """The statements of this database by total execution time (nested ones, in functions and triggers, too)."""
    return list(await conn.fetch(
        r"""SELECT toplevel, calls, rows, total_exec_time / 1000 AS seconds, total_plan_time / 1000 AS plan_seconds,
                  shared_blks_hit + shared_blks_read AS blocks,
                  regexp_replace(query, '\s+', ' ', 'g') AS query
           FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
           ORDER BY total_exec_time DESC LIMIT $1""", limit))


def print_statements(rows: list[Any], per: int = 0) -> None:
    """One line per statement: time, calls, rows, buffers touched, and the start of its text.

    With ``per`` (the events in the window), also the calls and the execution microseconds per event.
    """
    for row in rows:
        each = (f"{row['calls'] / per:5.2f}/ev {row['seconds'] * 1e6 / per:6.1f} us/ev " if per else "")
        print(f"  {row['seconds']:7.2f} s exec {row['plan_seconds']:5.2f} s plan {row['calls']:7d} calls "
              f"{row['rows']:8d} rows {row['blocks']:9d} blocks {each}{'top ' if row['toplevel'] else 'nest'} "
              f"{row['query'][:120]}")
