"""The admission gate (ARCHITECTURE §6): decide whether a run may proceed, and admit it exactly once.

A run that cannot proceed is still a run: it is inserted as ``skipped`` with a ``reason_code``, never
silently dropped. Admission is idempotent by the database: one run per delivery, one per
``(trigger, planned_at)``; a second admission returns the run that already exists.

A pull runtime is ready when one of its instances heartbeated within ``heartbeat_timeout_s``: every caller
passes ``settings.heartbeat_timeout_s`` (``HOOKGATE_HEARTBEAT_TIMEOUT_S``); there is no default to forget.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from hookgate.database import Conn
from hookgate.errors import HookgateError
from sql import Q


class AdmissionError(HookgateError):
    """The autopilot to admit a run for does not exist (a caller bug or a race with deletion)."""


@dataclass(frozen=True)
class Decision:
    """The gate's verdict: who is accountable, under which rule version, and why not (if not)."""

    reason_code: str | None
    reason: str | None
    accountable_id: UUID | None
    rule_version_id: UUID | None
    workspace_id: UUID


@dataclass(frozen=True)
class Admission:
    """An admitted run (new or already existing)."""

    run_id: UUID
    status: str
    reason_code: str | None
    created: bool


_SKIP = {
    "autopilot_paused": "the autopilot is paused",
    "autopilot_archived": "the autopilot is archived",
    "trigger_disabled": "the trigger is disabled",
    "trigger_deleted": "the trigger was deleted",
    "assignee_missing": "the assignee (agent or squad leader) does not exist",
    "agent_archived": "the assigned agent is archived",
    "runtime_offline": "the agent's runtime is not ready (no instance heartbeated recently)",
    "actor_forbidden": "the actor may not invoke this autopilot",
    "agent_private": "the agent is private to another member",
    "no_accountable_member": "no member can be held accountable for this run",
}


def accountable(facts: asyncpg.Record | dict[str, Any], source: str) -> UUID | None:
    """Manual runs: the clicker. Others: trigger publisher, else rule publisher, else workspace owner."""
    if source == "manual":
        return facts["clicker_id"]  # type: ignore[no-any-return]
    return facts["publisher_live_id"] or facts["owner_id"]  # type: ignore[no-any-return]


def evaluate(facts: asyncpg.Record | dict[str, Any], source: str) -> str | None:
    """The first reason the run cannot proceed, or None. Pure: facts come from ``admission_facts``."""
    if facts["autopilot_status"] == "paused":
        return "autopilot_paused"
    if facts["autopilot_status"] == "archived":
        return "autopilot_archived"
    if facts["trigger_id"] is not None and facts["trigger_deleted"]:
        return "trigger_deleted"
    if facts["trigger_id"] is not None and not facts["trigger_enabled"]:
        return "trigger_disabled"
    if source == "manual" and not facts["clicker_can_write"]:
        return "actor_forbidden"
    who = accountable(facts, source)
    if who is None:
        return "no_accountable_member"
    if facts["agent_id"] is None:
        return "assignee_missing"
    if facts["agent_archived"]:
        return "agent_archived"
    if facts["agent_visibility"] == "private" and facts["agent_owner_id"] != who:
        return "agent_private"
    if facts["execution_mode"] == "run_only" and not facts["runtime_ready"]:
        return "runtime_offline"
    return None


async def decide(
    conn: Conn, *, autopilot_id: UUID, trigger_id: UUID | None, source: str, heartbeat_timeout_s: float,
    clicker_id: UUID | None = None,
) -> Decision:
    """Read the facts (one round trip) and evaluate the gate."""
    facts = await conn.fetchrow(Q.admission_facts, [autopilot_id], [trigger_id], [clicker_id], heartbeat_timeout_s)
    if facts is None:
        raise AdmissionError(f"autopilot {autopilot_id} does not exist")
    code = evaluate(facts, source)
    return Decision(
        reason_code=code, reason=_SKIP.get(code) if code else None, accountable_id=accountable(facts, source),
        rule_version_id=facts["rule_version_id"], workspace_id=facts["workspace_id"],
    )


async def admit(
    conn: Conn, *, autopilot_id: UUID, source: str, payload: dict[str, Any], heartbeat_timeout_s: float,
    trigger_id: UUID | None = None, delivery_id: UUID | None = None, planned_at: datetime | None = None,
    clicker_id: UUID | None = None,
) -> Admission:
    """Run the gate and insert the run (``pending`` or ``skipped``), or return the one already admitted."""
    decision = await decide(
        conn, autopilot_id=autopilot_id, trigger_id=trigger_id, source=source, clicker_id=clicker_id,
        heartbeat_timeout_s=heartbeat_timeout_s,
    )
    status = "skipped" if decision.reason_code else "pending"
    row = await conn.fetchrow(
        Q.run_insert, decision.workspace_id, autopilot_id, trigger_id, delivery_id, source, status,
        decision.rule_version_id, planned_at, payload, clicker_id if source == "manual" else None,
        decision.accountable_id, decision.reason_code, decision.reason,
    )
    if row is not None:
        return Admission(row["id"], row["status"], row["reason_code"], created=True)
    return await _existing(conn, delivery_id, trigger_id, planned_at)


async def _existing(
    conn: Conn, delivery_id: UUID | None, trigger_id: UUID | None, planned_at: datetime | None
) -> Admission:
    if delivery_id is not None:
        row = await conn.fetchrow(Q.run_get_by_delivery, delivery_id)
    else:
        row = await conn.fetchrow(Q.run_get_by_plan, trigger_id, planned_at)
    if row is None:
        raise AdmissionError("run insert conflicted on a key this admission does not carry")
    return Admission(row["id"], row["status"], row["reason_code"], created=False)
