"""The admission gate (ARCHITECTURE §6) and ingress step 9: is a delivery taken, may its run proceed; admit it.

The one vocabulary: :data:`REASONS` holds every code and text of an ignored delivery (step 9,
:func:`why_ignored`) and of a skipped run (the gate, :func:`evaluate`). Ingress, replays, the delivery
worker's crash window and the scheduler all decide with these functions over :class:`Facts`, and all but
ingress (whose run is written by its own batched statement) admit with :func:`admit_many`.

Event filters: the trigger's ``event_filters`` is a JSON array of event names or shell-style glob
patterns (``*`` any run of characters, dots included; ``?`` one character; ``[abc]`` a set), matched
case-insensitively against the whole normalised event name (``github.pull_request.*``,
``stripe.invoice.*``). An empty array lets every event through; non-string entries are ignored.
Payload filters: the trigger's ``payload_filter`` (:mod:`autopilot.payload_filter`) is checked after the
event filters, over the envelope's payload; a delivery it refuses stores the deciding node in words.

A run that cannot proceed is still a run: it is inserted as ``skipped`` with a ``reason_code``, never
silently dropped. Admission is idempotent by the database: one run per delivery, one per
``(trigger, planned_at)``; a second admission returns the run that already exists.

A pull runtime is ready when one of its instances heartbeated within ``heartbeat_timeout_s``: every caller
passes ``settings.heartbeat_timeout_s`` (``HOOKGATE_HEARTBEAT_TIMEOUT_S``); there is no default to forget.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import payload_filter as pf
from hookgate.database import Conn
from hookgate.errors import HookgateError
from sql import Q

REASONS = {
    # Step 9: the delivery is ignored (the first four also skip a run the gate is asked about).
    "trigger_deleted": "the trigger was deleted",
    "trigger_disabled": "the trigger is disabled",
    "autopilot_paused": "the autopilot is paused",
    "autopilot_archived": "the autopilot is archived",
    "event_filtered": "the event does not match the trigger's event filters",
    "payload_filter": "the body does not match the trigger's payload filter",
    # The gate: the run is skipped.
    "assignee_missing": "the assignee (agent or squad leader) does not exist",
    "agent_archived": "the assigned agent is archived",
    "runtime_offline": "the agent's runtime is not ready (no instance heartbeated recently)",
    "actor_forbidden": "the actor may not invoke this autopilot",
    "agent_private": "the agent is private to another member",
    "no_accountable_member": "no member can be held accountable for this run",
}
"""Every reason code of an ignored delivery or a skipped run, and the text stored with it."""


class AdmissionError(HookgateError):
    """The autopilot to admit a run for does not exist (a caller bug or a race with deletion)."""


@dataclass(frozen=True)
class Facts:
    """What step 9 and the gate decide on: a row of ``admission_facts`` (or of ``ingress_trigger_lookup``)."""

    workspace_id: UUID
    autopilot_status: str
    execution_mode: str
    trigger_id: UUID | None
    trigger_enabled: bool | None
    trigger_deleted: bool | None
    event_filters: tuple[str, ...]
    """The trigger's filters; non-string entries (and a non-array value) are ignored."""
    payload_filter: pf.Filter | None
    """The trigger's payload filter, compiled (None: every body)."""
    rule_version_id: UUID | None
    agent_id: UUID | None
    agent_archived: bool | None
    agent_visibility: str | None
    agent_owner_id: UUID | None
    runtime_ready: bool | None
    owner_id: UUID | None
    clicker_id: UUID | None
    clicker_can_write: bool
    publisher_live_id: UUID | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Facts:
        """The facts of one row (its other columns are left out)."""
        filters = row["event_filters"]
        values = {name: row[name] for name in _FACT_COLUMNS}
        values["event_filters"] = tuple(f for f in filters if isinstance(f, str)) if isinstance(filters, list) else ()
        source = row["payload_filter"]
        values["payload_filter"] = None if source is None else pf.load(source)
        return cls(**values)


_FACT_COLUMNS = [f.name for f in fields(Facts)]


@dataclass(frozen=True)
class Decision:
    """The gate's verdict: who is accountable, under which rule version, and why not (if not)."""

    reason_code: str | None
    reason: str | None
    accountable_id: UUID | None
    rule_version_id: UUID | None
    workspace_id: UUID

    @classmethod
    def of(cls, facts: Facts, source: str) -> Decision:
        """The gate over ``facts`` for a run from ``source`` (pure)."""
        code = evaluate(facts, source)
        return cls(code, REASONS.get(code) if code else None, accountable(facts, source), facts.rule_version_id,
                   facts.workspace_id)


@dataclass(frozen=True)
class Request:
    """One run to admit; ``delivery_id`` or ``(trigger_id, planned_at)`` make it idempotent."""

    autopilot_id: UUID
    source: str
    payload: dict[str, Any]
    trigger_id: UUID | None = None
    delivery_id: UUID | None = None
    planned_at: datetime | None = None
    clicker_id: UUID | None = None


@dataclass(frozen=True)
class Admission:
    """An admitted run (new or already existing)."""

    run_id: UUID
    status: str
    reason_code: str | None
    created: bool

    @classmethod
    def from_row(cls, row: asyncpg.Record, *, created: bool) -> Admission:
        """The run of a row with ``id``, ``status`` and ``reason_code``."""
        return cls(row["id"], row["status"], row["reason_code"], created)


def event_allowed(filters: Sequence[str], event: str) -> bool:
    """No filters admit every event; else one must match (shell-style glob, case-insensitive)."""
    name = event.lower()
    return not filters or any(fnmatch.fnmatchcase(name, f.lower()) for f in filters)


@dataclass(frozen=True)
class Ignored:
    """Why step 9 does not take a delivery: its reason code and the text stored with it."""

    code: str
    reason: str

    @classmethod
    def of(cls, code: str) -> Ignored:
        """A reason with its usual text."""
        return cls(code, REASONS[code])


def why_ignored(facts: Facts, event: str, payload: object) -> Ignored | None:
    """Step 9: why a delivery of ``event`` with ``payload`` (the envelope's) is not taken, or None.

    A deleted or disabled trigger, a paused or archived autopilot, an event its event filters leave out,
    a body its payload filter refuses (the reason then names the deciding node in words).
    """
    if facts.trigger_id is None or facts.trigger_deleted:
        return Ignored.of("trigger_deleted")
    if not facts.trigger_enabled:
        return Ignored.of("trigger_disabled")
    if facts.autopilot_status in ("paused", "archived"):
        return Ignored.of(f"autopilot_{facts.autopilot_status}")
    if not event_allowed(facts.event_filters, event):
        return Ignored.of("event_filtered")
    if facts.payload_filter is not None and not facts.payload_filter.matches(payload):
        # The words are made for a refused body only: an accepted one pays for the tests alone.
        return Ignored("payload_filter", pf.describe(pf.evaluate(facts.payload_filter, payload)))
    return None


def accountable(facts: Facts, source: str) -> UUID | None:
    """Manual runs: the clicker. Others: trigger publisher, else rule publisher, else workspace owner."""
    if source == "manual":
        return facts.clicker_id
    return facts.publisher_live_id or facts.owner_id


def evaluate(facts: Facts, source: str) -> str | None:
    """The first reason the run cannot proceed, or None. Pure: facts come from ``admission_facts``."""
    if facts.autopilot_status in ("paused", "archived"):
        return f"autopilot_{facts.autopilot_status}"
    if facts.trigger_id is not None and facts.trigger_deleted:
        return "trigger_deleted"
    if facts.trigger_id is not None and not facts.trigger_enabled:
        return "trigger_disabled"
    if source == "manual" and not facts.clicker_can_write:
        return "actor_forbidden"
    who = accountable(facts, source)
    if who is None:
        return "no_accountable_member"
    if facts.agent_id is None:
        return "assignee_missing"
    if facts.agent_archived:
        return "agent_archived"
    if facts.agent_visibility == "private" and facts.agent_owner_id != who:
        return "agent_private"
    if facts.execution_mode == "run_only" and not facts.runtime_ready:
        return "runtime_offline"
    return None


async def read_facts(conn: Conn, requests: Sequence[Request], heartbeat_timeout_s: float) -> list[Facts | None]:
    """The facts of every request in one statement; None where the autopilot does not exist."""
    rows = await conn.fetch(Q.admission_facts, [r.autopilot_id for r in requests], [r.trigger_id for r in requests],
                            [r.clicker_id for r in requests], heartbeat_timeout_s)
    found = {row["n"]: Facts.from_row(row) for row in rows}
    return [found.get(n) for n in range(1, len(requests) + 1)]


def require_autopilot(facts: Facts | None, autopilot_id: UUID) -> Facts:
    """Facts :func:`read_facts` found; for None, :class:`AdmissionError`: the autopilot does not exist."""
    if facts is None:
        raise AdmissionError(f"autopilot {autopilot_id} does not exist")
    return facts


async def decide(
    conn: Conn, *, autopilot_id: UUID, trigger_id: UUID | None, source: str, heartbeat_timeout_s: float,
    clicker_id: UUID | None = None,
) -> Decision:
    """Read the facts (one round trip) and evaluate the gate."""
    [facts] = await read_facts(conn, [Request(autopilot_id, source, {}, trigger_id, clicker_id=clicker_id)],
                               heartbeat_timeout_s)
    return Decision.of(require_autopilot(facts, autopilot_id), source)


async def admit_many(
    conn: Conn, requests: Sequence[Request], *, heartbeat_timeout_s: float, facts: Sequence[Facts | None] = (),
) -> list[Admission]:
    """Run the gate for every request and insert their runs (``pending`` or ``skipped``) in one statement.

    A run admitted before is returned as it is. ``facts``: already read by :func:`read_facts` (step 9).
    """
    if not requests:
        return []
    known = list(facts) or await read_facts(conn, requests, heartbeat_timeout_s)
    decisions = [Decision.of(require_autopilot(fact, request.autopilot_id), request.source)
                 for request, fact in zip(requests, known, strict=True)]
    rows = await conn.fetch(Q.run_insert_many, *_run_columns(requests, decisions))
    return [Admission.from_row(row, created=True) if row["id"] is not None else await _existing(conn, request)
            for request, row in zip(requests, rows, strict=True)]


def _run_columns(requests: Sequence[Request], decisions: Sequence[Decision]) -> list[list[Any]]:
    """``run_insert_many``'s parallel arrays, $1..$13."""
    pairs = list(zip(requests, decisions, strict=True))
    return [
        [d.workspace_id for _, d in pairs], [r.autopilot_id for r, _ in pairs], [r.trigger_id for r, _ in pairs],
        [r.delivery_id for r, _ in pairs], [r.source for r, _ in pairs],
        ["skipped" if d.reason_code else "pending" for _, d in pairs], [d.rule_version_id for _, d in pairs],
        [r.planned_at for r, _ in pairs], [r.payload for r, _ in pairs],
        [r.clicker_id if r.source == "manual" else None for r, _ in pairs], [d.accountable_id for _, d in pairs],
        [d.reason_code for _, d in pairs], [d.reason for _, d in pairs],
    ]


async def admit(
    conn: Conn, *, autopilot_id: UUID, source: str, payload: dict[str, Any], heartbeat_timeout_s: float,
    trigger_id: UUID | None = None, delivery_id: UUID | None = None, planned_at: datetime | None = None,
    clicker_id: UUID | None = None,
) -> Admission:
    """Run the gate and insert the run (``pending`` or ``skipped``), or return the one already admitted."""
    request = Request(autopilot_id, source, payload, trigger_id, delivery_id, planned_at, clicker_id)
    [admitted] = await admit_many(conn, [request], heartbeat_timeout_s=heartbeat_timeout_s)
    return admitted


async def _existing(conn: Conn, request: Request) -> Admission:
    if request.delivery_id is not None:
        row = await conn.fetchrow(Q.run_get_by_delivery, request.delivery_id)
    else:
        row = await conn.fetchrow(Q.run_get_by_plan, request.trigger_id, request.planned_at)
    if row is None:
        raise AdmissionError("run insert conflicted on a key this admission does not carry")
    return Admission.from_row(row, created=False)
