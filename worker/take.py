"""The delivery worker's take: claim a batch of deliveries and dispatch the plain ones, in one statement.

:func:`take_batch` runs ``delivery_take`` (``sql/functions/hookgate_delivery_take.sql``): claim up to ``limit``
due deliveries, fair across workspaces first and then across each one's triggers, with pacing and, in the same
round trip, give every delivery whose admitted run is still plain
``pending`` (what ingress stores) its task, born claimed for pushing when its HTTP agent has a free slot. It
keeps the guards and per-agent slot claim of :func:`autopilot.dispatch.dispatch_run`; whatever is unusual
(crash window, create_issue, skipped, half-made, a run held elsewhere) comes back leased for the one-by-one path.
The tasks born claimed are capped per agent and per workspace by the pusher's fair shares (``rooms``,
:meth:`worker.push.Pusher.rooms`), passed in the same statement: it reads each task's workspace before it gives
the task a slot, so however many agents of one workspace the take meets, new or known, they share its room.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

import asyncpg

from autopilot import dispatch, tasks
from autopilot.deliveries import Delivery
from hookgate.database import Conn
from sql import Q
from worker.fairshare import Budget


@dataclass
class Taken:
    """What one take did: dispatched, claimed to push now, and leased for the one-by-one path."""

    dispatched: int = 0
    claimed: list[tasks.Claimed] = field(default_factory=list)
    leased: list[Delivery] = field(default_factory=list)
    triggers: set[UUID] = field(default_factory=set)
    workspaces: dict[UUID, set[UUID]] = field(default_factory=dict)
    """The workspaces of the batch, each with its triggers: where the round-robin cursors move to."""


def next_cursor(old: UUID | None, visited: Iterable[UUID]) -> UUID | None:
    """Where a round-robin walk that started after ``old`` resumes next time.

    The walk visits ids after ``old`` in order, then wraps round to those up to ``old``: it stopped at the
    largest id it visited at or before ``old`` when it wrapped, else at the largest it visited.
    """
    ids = list(visited)
    if not ids:
        return old
    wrapped = [i for i in ids if old is not None and i <= old]
    return max(wrapped) if wrapped else max(ids)


async def take_batch(
    conn: Conn, *, limit: int, lease_s: float, cursor: UUID | None, fanout: int, options: dispatch.Options,
    capacity: int, now: datetime | None = None, trigger_cursors: Mapping[UUID, UUID] | None = None,
    rooms: Budget | None = None, ids: Sequence[UUID] | None = None,
) -> Taken:
    """Claim up to ``limit`` due deliveries, dispatch the plain-pending ones and claim up to ``capacity`` pushes.

    ``cursor``: the workspace the previous take's walk stopped at; ``trigger_cursors``: per workspace, the
    trigger its walk stopped at; ``fanout``: triggers visited per workspace at most. One round trip: the claim,
    its pacing and the dispatch of what ingress stores; the rest comes back leased. ``rooms``: at most this many
    pushes per agent and per workspace (None = no bound), the task's workspace read before it gets a slot.
    ``ids``: take only these deliveries (those still queued and due), read by key instead of walking the queue.
    """
    claim = options.claim or dispatch.ClaimFor("")
    rows = await conn.fetch(
        Q.delivery_take, limit, lease_s, cursor, fanout, now, options.task_max_attempts, options.heartbeat_timeout_s,
        claim.holder, capacity if options.claim is not None else 0, claim.push_timeout_cap_s,
        claim.push_lease_margin_s, {str(w): str(t) for w, t in (trigger_cursors or {}).items()},
        *(rooms or Budget({}, {})).take_args(),
        claim.agent_cap, None if ids is None else list(ids),
    )
    taken = Taken(triggers={r["trigger_id"] for r in rows})
    for r in rows:
        taken.workspaces.setdefault(r["workspace_id"], set()).add(r["trigger_id"])
        if r["kind"] == "leased":
            taken.leased.append(Delivery.from_row(r))
            continue
        taken.dispatched += 1
        if r["claimed"]:
            taken.claimed.append(_claimed(r))
    return taken


def _claimed(row: asyncpg.Record) -> tasks.Claimed:
    return tasks.Claimed(
        id=row["task_id"], workspace_id=row["workspace_id"], run_id=row["run_id"], agent_id=row["agent_id"],
        payload=row["payload"], attempt=row["attempt"], max_attempts=row["max_attempts"],
        lease_token=row["task_lease_token"], lease_expires_at=row["lease_expires_at"],
        autopilot_id=row["autopilot_id"], autopilot_title=row["autopilot_title"],
        autopilot_instructions=row["autopilot_instructions"], endpoint_url=row["endpoint_url"],
        timeout_s=row["timeout_s"], signing_secret_ct=row["signing_secret_ct"],
        previous_secret_ct=row["previous_secret_ct"],
    )
