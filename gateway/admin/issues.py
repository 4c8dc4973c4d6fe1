"""Issues (the visible work items of ``create_issue`` autopilots) and agent tasks: list, read, update.

A task's ``result`` is the agent's answer, which may echo what it was sent: it is shown only to those who
may read answers (writers of the task's autopilot; owners and admins for a task without one), as the
attempts API shows an attempt's answer; anyone else in the workspace sees it as null.

An issue moved to ``done`` or ``cancelled`` ends its run: that state change belongs to the run lifecycle
(``autopilot.lifecycle``, dispatch area), called from one marked place below.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict

from autopilot import lifecycle
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints
from gateway.admin.pagination import Page, PageQuery
from gateway.admin.runs import agent_wait
from hookgate.database import one
from sql import Q

api = Endpoints("Issues and tasks")
IssueStatus = Literal["todo", "in_progress", "done", "cancelled"]
TaskStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class IssueOut(BaseModel):
    """An issue."""

    id: UUID
    autopilot_id: UUID | None
    run_id: UUID | None
    title: str
    body: str
    assignee_type: Literal["agent", "squad"] | None
    assignee_id: UUID | None
    status: IssueStatus
    created_at: datetime
    updated_at: datetime


class IssuePage(Page[IssueOut]):
    """A page of issues, newest first."""


class IssueQuery(PageQuery):
    """Filter issues."""

    status: IssueStatus | None = None
    autopilot_id: UUID | None = None


class IssuePatch(BaseModel):
    """The new status."""

    model_config = ConfigDict(extra="forbid")
    status: IssueStatus


class TaskOut(BaseModel):
    """One unit of agent work (the lease token is never shown)."""

    id: UUID
    run_id: UUID | None
    issue_id: UUID | None
    agent_id: UUID
    status: TaskStatus
    attempt: int
    max_attempts: int
    lease_expires_at: datetime | None
    holder_instance: str | None
    available_at: datetime
    #: The agent's answer; null for a caller who may not read its autopilot's answers (or none yet).
    result: Any
    error: str | None
    retry_class: str | None
    #: While the task waits to be retried (``queued`` after an attempt): when; and the last attempt's error.
    next_attempt_at: datetime | None
    last_error: str | None
    #: While queued for an unhealthy agent: ``waiting for the agent to recover (next probe …)``, and
    #: ``next_attempt_at`` is that probe.
    waiting: str | None = None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class TaskPage(Page[TaskOut]):
    """A page of tasks, newest first."""


class TaskQuery(PageQuery):
    """Filter tasks."""

    agent_id: UUID | None = None
    status: TaskStatus | None = None
    run_id: UUID | None = None


def issue_out(row: asyncpg.Record) -> IssueOut:
    """Render an issue row."""
    return IssueOut.model_validate(dict(row))


Row = asyncpg.Record | Mapping[str, Any]


def task_out(row: Row, *, full: bool) -> TaskOut:
    """Render a task row; without ``full`` the agent's answer (``result``) is null.

    A task held by its agent's open circuit says so (:func:`runs.agent_wait`).
    """
    waiting = agent_wait(row["status"], row["available_at"], row.get("agent_next_probe_at"))
    return TaskOut.model_validate(without_answer(row, full=full) | waiting)


def without_answer(row: Row, *, full: bool) -> dict[str, Any]:
    """A task row as a dict, its ``result`` left out (null) unless ``full``: one rule for the API and dashboard."""
    out = dict(row)
    if not full:
        out["result"] = None
    return out


async def answer_readers(call: Call, rows: Iterable[Row]) -> dict[UUID | None, bool]:
    """Whether the caller may read the answers of each autopilot (None: no autopilot) the rows belong to."""
    wanted = {row["autopilot_id"] for row in rows}
    if call.principal.is_admin:  # owners and admins read every answer: no lookup per autopilot
        return dict.fromkeys(wanted, True)
    return {a: await auth.may_read_answers(call.conn, call.principal, a) for a in wanted}


@api.add("GET", "/v1/issues", summary="List issues", response=IssuePage, query=IssueQuery)
async def list_issues(call: Call) -> dict[str, Any]:
    """Issues of the workspace, newest first."""
    q: IssueQuery = call.query
    return await pagination.fetch(call.conn, Q.issue_list, q, issue_out,
                                  call.principal.workspace_id, q.status, q.autopilot_id)


@api.add("GET", "/v1/issues/{issue_id}", summary="Get an issue", response=IssueOut)
async def get_issue(call: Call) -> IssueOut:
    """One issue."""
    return issue_out(await call.scoped(Q.issue_get, "issue"))


@api.add("PATCH", "/v1/issues/{issue_id}", summary="Change an issue's status", response=IssueOut, body=IssuePatch)
async def update_issue(call: Call) -> IssueOut:
    """Writers of the issue's autopilot (any member for an issue without one). done/cancelled end its run."""
    body: IssuePatch = call.body
    row = await call.scoped(Q.issue_get, "issue")
    if row["autopilot_id"] is not None:
        autopilot = await auth.autopilot_of(call.conn, call.principal, row["autopilot_id"])
        await auth.require_writer(call.conn, call.principal, autopilot)
    async with call.conn.transaction():
        updated = one(await call.conn.fetchrow(Q.issue_update_status, call.principal.workspace_id, row["id"],
                                               body.status))
        if updated["previous_status"] != body.status:
            # Sets the same status again, harmlessly; ends the run on done/cancelled and cancels its tasks.
            await lifecycle.issue_status_changed(call.conn, row["id"], body.status)
    return issue_out(updated)


@api.add("GET", "/v1/tasks", summary="List tasks", response=TaskPage, query=TaskQuery)
async def list_tasks(call: Call) -> dict[str, Any]:
    """Agent tasks of the workspace, newest first, by agent, status and run (results as ``GET /v1/tasks/{id}``)."""
    q: TaskQuery = call.query
    rows = await call.conn.fetch(Q.task_list, call.principal.workspace_id, q.agent_id, q.status, q.run_id,
                                 pagination.uuid_after(q), q.limit + 1)
    readers = await answer_readers(call, rows[:q.limit])
    return pagination.page(rows, q.limit, lambda r: task_out(r, full=readers[r["autopilot_id"]]),
                           lambda r: r["id"])


@api.add("GET", "/v1/tasks/{task_id}", summary="Get a task", response=TaskOut)
async def get_task(call: Call) -> TaskOut:
    """One agent task (its ``result`` only for those who may read its autopilot's answers)."""
    row = await call.scoped(Q.task_get, "task")
    return task_out(row, full=await auth.may_read_answers(call.conn, call.principal, row["autopilot_id"]))
