"""Set-based dispatch of a claimed batch of deliveries (the common case), in one statement.

Deliveries whose admitted run is still plain ``pending`` (what ingress stores) get their tasks, their runs
queued and themselves completed, and the tasks of HTTP agents are claimed for pushing at once, all in one
round trip (``delivery_dispatch_batch``, see ``hookgate_dispatch_pending`` in ``0005_perf.sql``): the same
guards and per-agent slot claim as :func:`autopilot.dispatch.dispatch_run` one by one. Whatever is unusual
(crash window, create_issue, skipped, half-made, lost lease) is left untouched for the one-by-one path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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
