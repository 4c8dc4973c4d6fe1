"""Replay a stored delivery as a NEW delivery, admitted like ingress (ARCHITECTURE §4, §9).

GitHub's own "redeliver" reuses its delivery id and is deduplicated away; a replay is how a user runs an
event again. The copy has no dedupe key (it must never collide with the original), keeps the original's
body, headers and envelope, points back with ``replayed_from_delivery_id``, and goes through the same gates
as a fresh request: ignored if the trigger or autopilot no longer admits it, else a run is admitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import asyncpg

from autopilot import admission, audit
from autopilot.deliveries import Delivery
from hookgate import notify
from hookgate.database import Conn, one
from hookgate.errors import HookgateError
from sql import Q


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


async def replay(conn: Conn, row: asyncpg.Record, actor_id: UUID, *, heartbeat_timeout_s: float) -> Replay:
    """Create the replay delivery of ``row``, admit its run (or ignore it), wake a worker, audit REPLAY.

    ``heartbeat_timeout_s`` is the setting the gate judges a pull runtime ready by.
    """
    original = Delivery.from_row(row)
    if original.status == "rejected":
        raise NotReplayable("rejected_delivery", "a delivery with a bad signature cannot be replayed")
    async with conn.transaction():
        if await conn.fetchrow(Q.trigger_hold, original.trigger_id) is None:
            raise NotReplayable("trigger_deleted", "the delivery's trigger was deleted")
        [facts] = await admission.read_facts(conn, [original.admission()], heartbeat_timeout_s)
        if facts is None:
            raise admission.AdmissionError(f"autopilot {original.autopilot_id} does not exist")
        code = admission.ignore_reason(facts, original.event)
        status = "ignored" if code else "queued"
        copy = Delivery.from_row(one(await conn.fetchrow(Q.delivery_insert_replay, original.id, status, code,
                                                         admission.REASONS.get(code or ""))))
        run_id = None
        if code is None:
            run_id, status, code = await _admit(conn, copy, facts, heartbeat_timeout_s)
        await audit.record(conn, "REPLAY", actor_type="member", actor_id=actor_id, subject_type="delivery",
                           subject_id=original.id, workspace_id=original.workspace_id,
                           detail={"delivery_id": str(copy.id), "status": status, "reason_code": code})
    return Replay(copy.id, status, run_id, code)


async def _admit(
    conn: Conn, copy: Delivery, facts: admission.Facts, heartbeat_timeout_s: float
) -> tuple[UUID, str, str | None]:
    """Ingress step 10-11 for the copy: its run through the gate (over the facts step 9 read); wake a worker."""
    [admitted] = await admission.admit_many(conn, [copy.admission()], heartbeat_timeout_s=heartbeat_timeout_s,
                                            facts=[facts])
    status = "dispatched" if admitted.status == "skipped" else "queued"
    await conn.fetchrow(Q.delivery_set_run, copy.id, admitted.run_id, status, admitted.reason_code)
    if status == "queued":
        await conn.execute(Q.notify_send, notify.DELIVERIES, str(copy.id))
    return admitted.run_id, status, admitted.reason_code
