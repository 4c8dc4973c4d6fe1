"""Replay a stored delivery as a NEW delivery, admitted like ingress (ARCHITECTURE §4, §9).

GitHub's own "redeliver" reuses its delivery id and is deduplicated away; a replay is how a user runs an
event again. The copy has no dedupe key (it must never collide with the original), keeps the original's
body, headers and envelope, points back with ``replayed_from_delivery_id``, and goes through the same gates
as a fresh request: ignored if the trigger or autopilot no longer admits it, else a run is admitted.

One replay (:func:`replay`, audited REPLAY) and a bulk replay (:func:`replay_many`, the caller audits the
lot) are the same code: one replay is a lot of one, so both take the same set-based statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from uuid import UUID

import asyncpg

from autopilot import admission, audit
from autopilot.deliveries import Delivery
from hookgate import notify
from hookgate.database import Conn
from hookgate.errors import Refused
from sql import Q


class NotReplayable(Refused):
    """The original cannot be replayed (``code``: ``rejected_delivery`` or ``trigger_deleted``)."""


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
    async with conn.transaction():
        [made] = await replay_many(conn, [row], heartbeat_timeout_s=heartbeat_timeout_s)
        await audit.record(conn, "REPLAY", actor_type="member", actor_id=actor_id, subject_type="delivery",
                           subject_id=row["id"], workspace_id=row["workspace_id"],
                           detail={"delivery_id": str(made.delivery_id), "status": made.status,
                                   "reason_code": made.reason_code})
    return made


async def replay_many(conn: Conn, rows: Sequence[asyncpg.Record], *, heartbeat_timeout_s: float) -> list[Replay]:
    """Replay every delivery of ``rows`` (distinct ids) in one transaction, set-based; one Replay per row, in order.

    The steps of one replay, each one statement for the lot: hold the triggers, read the admission facts
    once per (autopilot, trigger), insert the copies (``ignored`` ones with their reason), admit the others'
    runs through the gate, link them, and wake a worker once. Nothing is audited here: the caller records
    what was asked (REPLAY for one, REPLAY_BULK for a filter). Raises :class:`NotReplayable` (and replays
    nothing) if any original is rejected or its trigger was deleted.
    """
    originals = [Delivery.from_row(row) for row in rows]
    if any(o.status == "rejected" for o in originals):
        raise NotReplayable("rejected_delivery", "a delivery with a bad signature cannot be replayed")
    if not originals:
        return []
    async with conn.transaction():
        await _hold_triggers(conn, {o.trigger_id for o in originals})
        facts = await _facts(conn, originals, heartbeat_timeout_s)
        why = [admission.why_ignored(f, o.event, (o.envelope or {}).get("payload"))
               for o, f in zip(originals, facts, strict=True)]
        copies = await _insert_copies(conn, originals, why)
        taken = [(c, f) for c, f, ignored in zip(copies, facts, why, strict=True) if ignored is None]
        admitted = await _admit(conn, taken, heartbeat_timeout_s)
    return [admitted.get(copy.id) or Replay(copy.id, "ignored", None, ignored.code if ignored else None)
            for copy, ignored in zip(copies, why, strict=True)]


async def _hold_triggers(conn: Conn, trigger_ids: set[UUID]) -> None:
    """Hold the originals' triggers until commit (edits wait); a deleted one makes the lot not replayable."""
    held = {row["id"] for row in await conn.fetch(Q.trigger_hold, sorted(trigger_ids))}
    if held != trigger_ids:
        raise NotReplayable("trigger_deleted", "the delivery's trigger was deleted")


async def _facts(conn: Conn, originals: Sequence[Delivery], heartbeat_timeout_s: float) -> list[admission.Facts]:
    """The admission facts of each original (ingress step 9), read in one statement once per (autopilot, trigger)."""
    pairs = list(dict.fromkeys((o.autopilot_id, o.trigger_id) for o in originals))
    requests = [admission.Request(autopilot_id, "webhook", {}, trigger_id) for autopilot_id, trigger_id in pairs]
    found = dict(zip(pairs, await admission.read_facts(conn, requests, heartbeat_timeout_s), strict=True))
    return [admission.require_autopilot(found[o.autopilot_id, o.trigger_id], o.autopilot_id) for o in originals]


async def _insert_copies(conn: Conn, originals: Sequence[Delivery],
                         why: Sequence[admission.Ignored | None]) -> list[Delivery]:
    """The copies (``queued``, or ``ignored`` with the reason), in the originals' order."""
    codes = [ignored.code if ignored else None for ignored in why]
    rows = await conn.fetch(Q.delivery_insert_replays, [o.id for o in originals],
                            ["ignored" if code else "queued" for code in codes], codes,
                            [ignored.reason if ignored else None for ignored in why])
    made = {row["replayed_from_delivery_id"]: row["id"] for row in rows}
    return [replace(o, id=made[o.id], run_id=None, status="ignored" if code else "queued", lease_token=None,
                    dispatch_attempts=0)
            for o, code in zip(originals, codes, strict=True)]


async def _admit(
    conn: Conn, taken: Sequence[tuple[Delivery, admission.Facts]], heartbeat_timeout_s: float
) -> dict[UUID, Replay]:
    """Ingress steps 10-11 for the copies taken, by copy id: their runs through the gate in one statement.

    The gate judges the facts step 9 read; the copies are linked to their runs, and a worker is woken once
    if any is left queued.
    """
    if not taken:
        return {}
    admitted = await admission.admit_many(conn, [copy.admission() for copy, _ in taken],
                                          heartbeat_timeout_s=heartbeat_timeout_s, facts=[f for _, f in taken])
    made = [Replay(copy.id, "dispatched" if a.status == "skipped" else "queued", a.run_id, a.reason_code)
            for (copy, _), a in zip(taken, admitted, strict=True)]
    await conn.fetchval(Q.delivery_set_runs, [r.delivery_id for r in made], [r.run_id for r in made],
                        [r.status for r in made], [r.reason_code for r in made])
    queued = [r for r in made if r.status == "queued"]
    if queued:  # a hint only (the worker also polls): one for the lot, naming them
        await conn.execute(Q.notify_send, notify.DELIVERIES, notify.name_deliveries([r.delivery_id for r in queued]))
    return {r.delivery_id: r for r in made}
