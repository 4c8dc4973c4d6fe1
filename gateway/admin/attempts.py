"""Task attempts: one row per push attempt and per pull runtime's lease outcome (``task_attempt``).

Anyone in the workspace sees an attempt's outcome, timing, HTTP status and error; the agent's answer (the
kept response headers and the first 4 KiB of its body) only writers of the task's autopilot (owners and
admins for a task without one), since an agent may echo what it was sent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel

from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints
from gateway.admin.pagination import Page, PageQuery
from sql import Q

api = Endpoints("Issues and tasks")
AttemptOutcome = Literal["succeeded", "accepted", "failed", "timeout", "unreachable", "egress_forbidden",
                         "lease_lost", "cancelled"]


class AttemptOut(BaseModel):
    """One attempt of a task; ``response_headers`` and ``response_body`` only for writers of its autopilot."""

    id: UUID
    task_id: UUID
    run_id: UUID | None
    agent_id: UUID
    attempt: int
    started_at: datetime
    finished_at: datetime
    duration_ms: int
    outcome: AttemptOutcome
    http_status: int | None
    error: str | None
    response_headers: dict[str, str] | None = None
    response_body: str | None = None


class AttemptPage(Page[AttemptOut]):
    """A page of attempts, oldest first."""


def attempt_out(row: asyncpg.Record, *, full: bool) -> AttemptOut:
    """Render an attempt; without ``full`` the agent's answer (headers, body excerpt) is left out."""
    out = dict(row)
    if not full:
        out |= {"response_headers": None, "response_body": None}
    return AttemptOut.model_validate(out)


@api.add("GET", "/v1/tasks/{task_id}/attempts", summary="List a task's attempts", response=AttemptPage,
         query=PageQuery)
async def list_attempts(call: Call) -> dict[str, Any]:
    """Every attempt of a task, oldest first: outcome, timing, HTTP status, error (and, for writers, the answer)."""
    q: PageQuery = call.query
    task = await call.scoped(Q.task_get, "task")
    full = await auth.may_read_answers(call.conn, call.principal, task["autopilot_id"])
    return await pagination.fetch(call.conn, Q.attempt_list, q, lambda r: attempt_out(r, full=full),
                                  call.principal.workspace_id, task["id"])
