"""Issues (the visible work items of ``create_issue`` autopilots) and agent tasks: list, read, update.

An issue moved to ``done`` or ``cancelled`` ends its run: that state change belongs to the run lifecycle
(``autopilot.lifecycle``, dispatch area), called from one marked place below.
"""

from __future__ import annotations

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


def task_out(row: asyncpg.Record) -> TaskOut:
    """Render a task row (a task held by its agent's open circuit says so: :func:`runs.agent_wait`)."""
    return TaskOut.model_validate(dict(row) | agent_wait(row["status"], row["available_at"],
                                                         row.get("agent_next_probe_at")))


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
    """Agent tasks of the workspace, newest first, by agent, status and run."""
    q: TaskQuery = call.query
    return await pagination.fetch(call.conn, Q.task_list, q, task_out,
                                  call.principal.workspace_id, q.agent_id, q.status, q.run_id)


@api.add("GET", "/v1/tasks/{task_id}", summary="Get a task", response=TaskOut)
async def get_task(call: Call) -> TaskOut:
    """One agent task."""
    return task_out(await call.scoped(Q.task_get, "task"))
