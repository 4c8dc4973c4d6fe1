"""``rejection_spikes`` (every minute): raise ``trigger.rejections_spike`` for a trigger flooded with rejections.

At least 20 deliveries of one trigger rejected (bad, missing or expired signature: usually a provider still
signing with an old secret) in the last 5 minutes raise the alert, at most once per trigger per 5 minutes.
The count reads what ingress stored anyway (rejected ``webhook_delivery`` rows, by a partial index): ingress
does no extra work. When each trigger's last spike was raised is kept in ``trigger_rejection_alert`` and
claimed by a guarded upsert, so several schedulers, or one restarted, never raise a spike twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from autopilot import alerts
from hookgate.database import Conn
from scheduler.maintenance.periodic import periodic_spec
from scheduler.spec import Batch, JobSpec
from sql import Q

NAME = "rejection_spikes"
EVERY = timedelta(minutes=1)
#: The rule: this many rejected deliveries of one trigger within the window raise the alert, once per window.
WINDOW = timedelta(minutes=5)
THRESHOLD = 20


async def raise_spikes(conn: Conn, now: datetime) -> list[str]:
    """Raise the alert for every trigger over the threshold in the window ending at ``now``; their ids."""
    raised = []
    async with conn.transaction():
        for row in await conn.fetch(Q.rejection_spikes_raise, now, WINDOW.total_seconds(), THRESHOLD):
            await alerts.emit(conn, row["workspace_id"], alerts.TRIGGER_REJECTIONS_SPIKE, {
                "trigger_id": str(row["trigger_id"]), "autopilot_id": str(row["autopilot_id"]),
                "provider": row["provider"], "rejected": row["rejected"], "threshold": THRESHOLD,
                "window_s": int(WINDOW.total_seconds()), "window_end": now.isoformat()})
            raised.append(str(row["trigger_id"]))
    return raised


def rejection_spikes_job(every: timedelta = EVERY) -> JobSpec:
    """The check as a maintenance job, once a minute across all schedulers; its result lists the triggers."""

    async def handler(batch: Batch) -> None:
        for run in batch.runs:
            async with batch.pool.acquire() as conn:
                raised: list[Any] = await raise_spikes(conn, run.now)
            run.result = {"raised": raised}

    return periodic_spec(NAME, every, handler)
