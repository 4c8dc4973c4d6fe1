"""``auto_pause`` (every 5 min): pause autopilots whose runs mostly fail.

At least 50 finished runs (completed, failed, cancelled) in 7 days, at least 90 % of them failed: paused with
a system rule version (``change = 'auto_pause'``), an ``AUTO_PAUSE`` audit entry and an ``autopilot.paused`` alert.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from autopilot import alerts, audit, rules
from hookgate.database import Conn
from scheduler.maintenance.periodic import periodic_spec
from scheduler.spec import Batch, JobSpec
from sql import Q

NAME = "auto_pause"

#: The auto-pause rule: at least this many finished runs in the window, at least this share failed.
AUTO_PAUSE_WINDOW = timedelta(days=7)
AUTO_PAUSE_MIN_RUNS = 50
AUTO_PAUSE_FAILED_SHARE = 0.9


async def _pause(conn: Conn, row: Any) -> bool:
    """Pause one failing autopilot with a system rule version and an AUTO_PAUSE audit entry."""
    async with conn.transaction():
        changed = await conn.fetchrow(Q.autopilot_set_status, row["autopilot_id"], "paused")
        if changed is None:
            return False
        await rules.publish(conn, row["autopilot_id"], "auto_pause", rules.Publisher.system())
        await audit.record(
            conn, "AUTO_PAUSE", actor_type="system", actor_id=None, subject_type="autopilot",
            subject_id=row["autopilot_id"], workspace_id=changed["workspace_id"],
            detail={"finished_runs": row["finished"], "failed_runs": row["failed"],
                    "window_days": AUTO_PAUSE_WINDOW.days, "threshold": AUTO_PAUSE_FAILED_SHARE},
        )
        await alerts.emit(conn, changed["workspace_id"], alerts.AUTOPILOT_PAUSED, {
            "autopilot_id": str(row["autopilot_id"]), "title": changed["title"], "reason": "auto_pause",
            "finished_runs": row["finished"], "failed_runs": row["failed"], "window_days": AUTO_PAUSE_WINDOW.days,
            "threshold": AUTO_PAUSE_FAILED_SHARE})
    return True


def auto_pause_job(every: timedelta = timedelta(minutes=5)) -> JobSpec:
    """Pause autopilots whose runs mostly fail: ≥ 50 finished runs in 7 days with ≥ 90 % failed."""

    async def handler(batch: Batch) -> None:
        for run in batch.runs:
            async with batch.pool.acquire() as conn:
                rows = await conn.fetch(Q.run_failure_rates, run.now, AUTO_PAUSE_WINDOW.total_seconds(),
                                        AUTO_PAUSE_MIN_RUNS, AUTO_PAUSE_FAILED_SHARE)
                paused = [str(row["autopilot_id"]) for row in rows if await _pause(conn, row)]
            run.result = {"paused": paused}

    return periodic_spec(NAME, every, handler)
