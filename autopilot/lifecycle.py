"""Run lifecycle (ARCHITECTURE §6): runs end from downstream facts, never from a guess.

A task that ends ends its run (succeeded → completed, failed → failed, cancelled → cancelled); an issue
moved to done or cancelled ends its run too, and cancels the run's unfinished tasks. A run keeps its first
ending. Cancelling a run's tasks (:func:`cancel_tasks`, also used by the admin API's run cancel and the
deadline sweep) reaches running work: the holder of a running task is told on ``hookgate_cancels`` (a
pushing worker aborts the push) and its next renew or report gets 409 ``cancelled``. A run ending failed
raises the ``run.failed`` alert (:mod:`autopilot.alerts`) in the same transaction.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from autopilot import alerts, audit
from hookgate import metrics, notify
from hookgate.database import Conn
from hookgate.errors import HookgateError
from sql import Q

_RUN_STATUS = {"succeeded": "completed", "failed": "failed", "cancelled": "cancelled"}
ISSUE_STATUSES = ("todo", "in_progress", "done", "cancelled")
#: A failed run's reason (an agent's error text) is cut to this length in its alert.
MAX_REASON_CHARS = 1000


class IssueNotFound(HookgateError, LookupError):
    """No such issue."""


async def task_finished(conn: Conn, run_id: UUID | None, task_status: str, error: str | None = None) -> None:
    """The task of ``run_id`` reached a terminal status: end the run accordingly.

    A run that fails here fails for good (its task has no attempt left): that raises ``run.failed``.
    """
    metrics.COMPLETIONS.labels("tasks", task_status).inc()
    if run_id is None or task_status not in _RUN_STATUS:
        return
    code = "task_failed" if task_status == "failed" else None
    ended = await conn.fetchrow(Q.run_finish, run_id, _RUN_STATUS[task_status], code, error if code else None)
    if ended is not None and ended["status"] == "failed":
        await alerts.emit(conn, ended["workspace_id"], alerts.RUN_FAILED, run_failed_data(ended))


def run_failed_data(run: asyncpg.Record) -> dict[str, Any]:
    """The data of a ``run.failed`` alert: which run, of which autopilot and trigger, and why."""
    reason = run["reason"]
    return {"run_id": str(run["id"]), "autopilot_id": str(run["autopilot_id"]),
            "trigger_id": None if run["trigger_id"] is None else str(run["trigger_id"]), "source": run["source"],
            "reason_code": run["reason_code"],
            "reason": None if reason is None else reason[:MAX_REASON_CHARS],
            "finished_at": run["finished_at"].isoformat()}


async def issue_status_changed(conn: Conn, issue_id: UUID, status: str) -> asyncpg.Record:
    """Set an issue's status (the admin API's ``PATCH /v1/issues/{id}``); done/cancelled end its run."""
    if status not in ISSUE_STATUSES:
        raise ValueError(f"unknown issue status {status!r}")
    async with conn.transaction():
        issue = await conn.fetchrow(Q.issue_set_status, issue_id, status)
        if issue is None:
            raise IssueNotFound(str(issue_id))
        if status in ("done", "cancelled") and issue["run_id"] is not None:
            ended = "completed" if status == "done" else "cancelled"
            await conn.fetchrow(Q.run_finish, issue["run_id"], ended, f"issue_{status}", None)
            await cancel_tasks(conn, issue["run_id"], f"issue_{status}", issue["workspace_id"])
    return issue


async def cancel_tasks(conn: Conn, run_id: UUID, reason: str, workspace_id: UUID | None) -> list[asyncpg.Record]:
    """Cancel the run's queued and running tasks, in the caller's transaction; returns them (``was``: before).

    Each is audited TASK_CANCEL. A running task's holder is told on ``hookgate_cancels`` (payload: the task
    id) so a push in flight is aborted, and its agent's waiting claims are woken (``hookgate_tasks``): the
    task's concurrency slot is free now. The notifications go out when the caller commits.
    """
    cancelled = await conn.fetch(Q.task_cancel_for_run, run_id)
    woken: set[UUID] = set()
    for task in cancelled:
        await audit.record(conn, "TASK_CANCEL", actor_type="system", actor_id=None, subject_type="agent_task",
                           subject_id=task["id"], workspace_id=workspace_id,
                           detail={"reason": reason, "was": task["was"]})
        if task["was"] == "running":
            await conn.execute(Q.notify_send, notify.CANCELS, str(task["id"]))
            if task["agent_id"] not in woken:
                woken.add(task["agent_id"])
                await conn.execute(Q.notify_send, notify.TASKS, str(task["id"]))
    return cancelled
