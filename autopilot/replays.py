"""Replay a stored delivery as a NEW delivery, admitted like ingress (ARCHITECTURE §4, §9).

GitHub's own "redeliver" reuses its delivery id and is deduplicated away; a replay is how a user runs an
event again. The copy has no dedupe key (it must never collide with the original), keeps the original's
body, headers and envelope, points back with ``replayed_from_delivery_id``, and goes through the same gates
as a fresh request: ignored if the trigger or autopilot no longer admits it, else a run is admitted.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import admission, audit
from hookgate import notify
from hookgate.database import Conn, one
from hookgate.errors import HookgateError
from sql import Q

_IGNORED = {
    "trigger_disabled": "the trigger is disabled",
    "autopilot_paused": "the autopilot is paused",
    "autopilot_archived": "the autopilot is archived",
    "event_filtered": "the event does not match the trigger's event filters",
}


class NotReplayable(HookgateError):
    """The original cannot be replayed (``code``: ``rejected_delivery`` or ``trigger_deleted``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Replay:
    """The new delivery, its status, and the run admitted for it (None when ignored).

    ``queued``: a pending run the worker dispatches; ``dispatched``: the gate skipped the run (``reason_code``
    says why; nothing is left to do); ``ignored``: the trigger or autopilot no longer takes the event.
    """

    delivery_id: UUID
    status: str
    run_id: UUID | None
    reason_code: str | None


def event_allowed(filters: list[str], event: str) -> bool:
    """No filters admit every event; else one must match (shell-style glob, case-insensitive, as ingress)."""
    name = event.lower()
    return not filters or any(fnmatch.fnmatchcase(name, f.lower()) for f in filters if isinstance(f, str))


def ignore_reason(trigger: asyncpg.Record, autopilot_status: str, event: str) -> str | None:
    """Ingress step 9: why a delivery for this trigger would be ignored, or None."""
    if not trigger["enabled"]:
        return "trigger_disabled"
    if autopilot_status == "paused":
        return "autopilot_paused"
    if autopilot_status == "archived":
        return "autopilot_archived"
    if not event_allowed(list(trigger["event_filters"]), event):
        return "event_filtered"
    return None


async def replay(conn: Conn, original: asyncpg.Record, actor_id: UUID, *, heartbeat_timeout_s: float) -> Replay:
    """Create the replay delivery, admit its run (or ignore it), wake a worker, audit REPLAY.

    ``heartbeat_timeout_s`` is the setting the gate judges a pull runtime ready by.
    """
    if original["status"] == "rejected":
        raise NotReplayable("rejected_delivery", "a delivery with a bad signature cannot be replayed")
    async with conn.transaction():
        trigger = await conn.fetchrow(Q.trigger_hold, original["trigger_id"])
        if trigger is None:
            raise NotReplayable("trigger_deleted", "the delivery's trigger was deleted")
        autopilot = one(await conn.fetchrow(Q.autopilot_get_any, original["autopilot_id"]))
        code = ignore_reason(trigger, autopilot["status"], original["event"])
        status = "ignored" if code else "queued"
        row = one(await conn.fetchrow(Q.delivery_insert_replay, original["id"], status, code, _IGNORED.get(code or "")))
        run_id = None
        if code is None:
            run_id, status, code = await _admit(conn, row, heartbeat_timeout_s)
        await audit.record(conn, "REPLAY", actor_type="member", actor_id=actor_id, subject_type="delivery",
                           subject_id=original["id"], workspace_id=original["workspace_id"],
                           detail={"delivery_id": str(row["id"]), "status": status, "reason_code": code})
    return Replay(row["id"], status, run_id, code)


async def _admit(conn: Conn, delivery: asyncpg.Record, heartbeat_timeout_s: float) -> tuple[UUID, str, str | None]:
    """Ingress step 10-11 for the copy: its run through the gate; wake a worker when there is work."""
    payload: dict[str, Any] = delivery["envelope"] or {}
    admitted = await admission.admit(
        conn, autopilot_id=delivery["autopilot_id"], source="webhook", payload=payload,
        trigger_id=delivery["trigger_id"], delivery_id=delivery["id"], heartbeat_timeout_s=heartbeat_timeout_s,
    )
    status = "dispatched" if admitted.status == "skipped" else "queued"
    await conn.fetchrow(Q.delivery_set_run, delivery["id"], admitted.run_id, status, admitted.reason_code)
    if status == "queued":
        await conn.execute(Q.notify_send, notify.DELIVERIES, str(delivery["id"]))
    return admitted.run_id, status, admitted.reason_code
