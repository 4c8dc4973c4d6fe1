"""Set-based dispatch of deliveries (the common case): claimed and dispatched in one statement.

:func:`take` is the worker's hot path (``delivery_take``, ``sql/functions/hookgate_delivery_take.sql``):
claim a batch with pacing and, in the same round trip, give every delivery whose admitted run is still plain
``pending`` (what ingress stores) its task, born claimed for pushing when its HTTP agent has a free slot.
:func:`dispatch_pending` does the dispatch part for a batch already leased (``delivery_dispatch_batch``,
``sql/functions/hookgate_dispatch_pending.sql``), the fallback when the one-statement take fails. Both
keep the guards and per-agent slot claim of :func:`autopilot.dispatch.dispatch_run`; whatever is unusual
(crash window, create_issue, skipped, half-made, lost lease) is left to the one-by-one path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

import asyncpg

from autopilot import dispatch, tasks
from hookgate.database import Conn
from sql import Q


@dataclass
class Batch:
    """What the fast path did: the deliveries it dispatched and the tasks claimed for pushing now."""

    done: set[UUID] = field(default_factory=set)
    claimed: list[tasks.Claimed] = field(default_factory=list)


async def dispatch_pending(
    conn: Conn, deliveries: Sequence[asyncpg.Record], options: dispatch.Options, capacity: int
) -> Batch:
    """Dispatch the plain-pending deliveries of a leased batch; claim up to ``capacity`` tasks to push."""
    mine = [d for d in deliveries if d["run_id"] is not None]
    if not mine:
        return Batch()
    claim = options.claim or dispatch.ClaimFor("")
    rows = await conn.fetch(
        Q.delivery_dispatch_batch, [d["id"] for d in mine], [d["lease_token"] for d in mine],
        options.task_max_attempts, options.heartbeat_timeout_s, claim.holder,
        capacity if options.claim is not None else 0, claim.push_timeout_cap_s, claim.push_lease_margin_s,
    )
    return Batch({r["delivery_id"] for r in rows}, [tasks.Claimed.from_row(r) for r in rows if r["claimed"]])


@dataclass
class Taken:
    """What one claim-and-dispatch statement did: dispatched, claimed to push now, and leased for the slow path."""

    dispatched: int = 0
    claimed: list[tasks.Claimed] = field(default_factory=list)
    leased: list[asyncpg.Record] = field(default_factory=list)
    triggers: set[UUID] = field(default_factory=set)


async def take(
    conn: Conn, *, limit: int, lease_s: float, cursor: UUID | None, fanout: int, options: dispatch.Options,
    capacity: int, now: datetime | None = None,
) -> Taken:
    """Claim up to ``limit`` due deliveries, dispatch the plain-pending ones and claim up to ``capacity`` pushes.

    One round trip (``delivery_take``): the claim, its pacing and the dispatch of what ingress stores; the
    rest comes back leased, for the one-by-one path.
    """
    claim = options.claim or dispatch.ClaimFor("")
    rows = await conn.fetch(
        Q.delivery_take, limit, lease_s, cursor, fanout, now, options.task_max_attempts, options.heartbeat_timeout_s,
        claim.holder, capacity if options.claim is not None else 0, claim.push_timeout_cap_s,
        claim.push_lease_margin_s,
    )
    taken = Taken(triggers={r["trigger_id"] for r in rows})
    for r in rows:
        if r["kind"] == "leased":
            taken.leased.append(r)
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
    )
