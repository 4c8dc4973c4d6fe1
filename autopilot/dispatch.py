"""Run dispatch (ARCHITECTURE §5): turn an admitted run into its issue (create_issue) and its task, exactly once.

Every step has its dedupe key: one issue per run (unique ``run_id``), one task per run attempt
(``run:<run id>:1``). The run row is locked first, so concurrent dispatchers of one run queue up and the
later one finds the work done; a half-made run (issue without task) is completed, never duplicated.
An admitted run is never dropped by a later pause: the gate is not re-checked here, only whether the
agent can run at all.
"""

from __future__ import annotations

import contextlib
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import tasks
from hookgate import notify, retry
from hookgate.database import Conn
from hookgate.errors import HookgateError
from sql import Q


class DispatchError(HookgateError, LookupError):
    """The run to dispatch does not exist."""


@dataclass(frozen=True)
class ClaimFor:
    """Ask dispatch to claim a new HTTP agent's task at once for this holder (no second queue hop)."""

    holder: str
    push_timeout_cap_s: float = 60.0
    push_lease_margin_s: float = 30.0
    #: No agent's concurrency cap above this (``HOOKGATE_AGENT_MAX_CONCURRENCY``; None: each agent's own).
    agent_cap: int | None = None
    #: Asked with the run's workspace and agent before claiming: may the holder start one more push for them now
    #: (its fair share of push slots)? No: the task stays queued for the holder's push loop. None: always.
    admit: Callable[[UUID, UUID], bool] | None = None


@dataclass(frozen=True)
class Options:
    """How dispatch builds tasks: runtime readiness window, attempts per task, optional immediate claim.

    ``heartbeat_timeout_s`` has no default: callers pass ``settings.heartbeat_timeout_s``.
    """

    heartbeat_timeout_s: float
    task_max_attempts: int = retry.Schedule.parse(retry.DEFAULT).attempts
    claim: ClaimFor | None = None


@dataclass(frozen=True)
class Dispatched:
    """Where a run stands after dispatch, and the task claimed for pushing now, if any."""

    run_id: UUID
    status: str
    issue_id: UUID | None
    task_id: UUID | None
    claimed: tasks.Claimed | None = None


def issue_title(run: asyncpg.Record) -> str:
    """The issue title: the autopilot's template (``$title``, ``$event`` placeholders) or its title."""
    payload = run["payload"] if isinstance(run["payload"], dict) else {}
    template = run["issue_title_template"] or "$title"
    text = string.Template(template).safe_substitute(title=run["title"], event=payload.get("event", ""))
    return text[:500] or run["title"]


def task_key(run_id: UUID, attempt: int = 1) -> str:
    """The idempotency key of a run attempt's task."""
    return f"run:{run_id}:{attempt}"


async def dispatch_run(conn: Conn, run_id: UUID, options: Options) -> Dispatched:
    """Create the run's issue (create_issue) and task, or mark it skipped; idempotent and repairing."""
    # Inside the caller's transaction (the delivery worker's) no savepoint is needed: any error rolls back all.
    async with contextlib.nullcontext() if conn.is_in_transaction() else conn.transaction():
        run = await conn.fetchrow(Q.run_lock_for_dispatch, run_id, options.heartbeat_timeout_s)
        if run is None:
            raise DispatchError(str(run_id))
        if run["status"] not in ("pending", "issue_created") or run["waiting"]:
            # Ended, already dispatched, or buffered behind an unfinished run of its trigger (buffer_one).
            return Dispatched(run_id, run["status"], run["issue_id"], run["task_id"])
        issue_id = run["issue_id"]
        if run["execution_mode"] == "create_issue":
            issue_id = await ensure_issue(conn, run)
        reason = _cannot_run(run)
        if reason is not None:
            await conn.execute(Q.run_skip, run_id, reason[0], reason[1])
            return Dispatched(run_id, "skipped", issue_id, None)
        task_id = await _ensure_task(conn, run, issue_id, options.task_max_attempts)
        status = await conn.fetchval(Q.run_set_task, run_id, task_id)
        claimed = await _claim_now(conn, run, task_id, options.claim)
        if claimed is None:
            await conn.execute(Q.notify_send, notify.TASKS, str(task_id))
            return Dispatched(run_id, status, issue_id, task_id)
        return Dispatched(run_id, "running", issue_id, task_id, claimed)


def _cannot_run(run: asyncpg.Record) -> tuple[str, str] | None:
    """Why the resolved agent cannot take the task (create_issue still got its issue)."""
    if run["agent_id"] is None:
        return "assignee_missing", "the assignee (agent or squad leader) does not exist"
    if run["agent_archived"]:
        return "agent_archived", "the assigned agent is archived"
    if run["execution_mode"] == "run_only" and not run["runtime_ready"]:
        return "runtime_offline", "the agent's runtime is not ready (no instance heartbeated recently)"
    return None


async def ensure_issue(conn: Conn, run: asyncpg.Record) -> UUID:
    """The run's issue (a ``run_lock_for_dispatch`` row), made once: a second call finds the first one's."""
    issue_id: UUID | None = await conn.fetchval(
        Q.issue_insert_for_run, run["workspace_id"], run["autopilot_id"], run["id"], issue_title(run),
        run["instructions"], run["assignee_type"], run["assignee_id"],
    )
    if issue_id is None:
        issue_id = (await conn.fetchrow(Q.issue_get_by_run, run["id"]))["id"]  # type: ignore[index]
    await conn.execute(Q.run_set_issue, run["id"], issue_id)
    assert issue_id is not None
    return issue_id


async def _ensure_task(conn: Conn, run: asyncpg.Record, issue_id: UUID | None, max_attempts: int) -> UUID:
    key = task_key(run["id"])
    payload: Any = run["payload"]
    task_id: UUID | None = await conn.fetchval(
        Q.task_insert_for_run, run["workspace_id"], run["id"], issue_id, run["agent_id"], payload,
        max_attempts, key,
    )
    if task_id is None:
        task_id = await conn.fetchval(Q.task_get_by_key, key)
    assert task_id is not None
    return task_id


async def _claim_now(
    conn: Conn, run: asyncpg.Record, task_id: UUID, claim: ClaimFor | None
) -> tasks.Claimed | None:
    """No second queue hop: the worker that made an HTTP agent's task claims it (if a slot is free) to push it."""
    if claim is None or run["runtime_kind"] != "http":
        return None
    if claim.admit is not None and not claim.admit(run["workspace_id"], run["agent_id"]):
        return None
    lease = tasks.push_lease_s(run["timeout_s"], claim.push_timeout_cap_s, claim.push_lease_margin_s)
    won = await tasks.claim(conn, agent_id=run["agent_id"], task_id=task_id, lease_s=lease,
                            holder=claim.holder, actor_type="worker", cap=claim.agent_cap)
    return won[0] if won else None
