"""Autopilots: create, read, edit, pause/resume/archive, rule versions and collaborators.

Every substantive change appends a rule version in the same transaction (``autopilot.editing``); an edit
re-stamps every trigger's publisher with the editor, so they are accountable for the runs that follow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from autopilot import editing, rules
from autopilot.rules import Publisher
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints, patch_fields
from gateway.admin.pagination import Page, PageQuery
from gateway.errors import ApiError
from hookgate.database import Conn
from sql import Q

api = Endpoints("Autopilots")
Mode = Literal["run_only", "create_issue"]
#: The longest run deadline: a year.
MAX_RUN_TIMEOUT_S = 365 * 24 * 3600
Status = Literal["active", "paused", "archived"]


class Assignee(BaseModel):
    """Who does the work: an agent, or a squad (its leader)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["agent", "squad"]
    id: UUID


class AutopilotIn(BaseModel):
    """A new autopilot."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=500)
    instructions: str = Field(default="", max_length=100_000)
    assignee: Assignee
    execution_mode: Mode = "create_issue"
    issue_title_template: str | None = Field(default=None, max_length=500)
    run_timeout_s: int | None = Field(default=None, ge=1, le=MAX_RUN_TIMEOUT_S, strict=True, description=(
        "A run not finished this many seconds after it was created (or retried) fails (deadline_exceeded) "
        "and its tasks are cancelled; null: no deadline"))


class AutopilotPatch(BaseModel):
    """Fields to change; every one is substantive (a new rule version, publishers re-stamped)."""

    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(default=None, min_length=1, max_length=500)
    instructions: str | None = Field(default=None, max_length=100_000)
    assignee: Assignee | None = None
    execution_mode: Mode | None = None
    issue_title_template: str | None = Field(default=None, max_length=500)
    run_timeout_s: int | None = Field(default=None, ge=1, le=MAX_RUN_TIMEOUT_S, strict=True,
                                      description="Seconds; null removes the deadline")


class AutopilotOut(BaseModel):
    """An autopilot and its current rule version number."""

    id: UUID
    title: str
    instructions: str
    assignee: Assignee
    execution_mode: Mode
    status: Status
    issue_title_template: str | None
    run_timeout_s: int | None
    created_by: UUID
    created_at: datetime
    updated_at: datetime
    version: int


class AutopilotPage(Page[AutopilotOut]):
    """A page of autopilots."""


class AutopilotQuery(PageQuery):
    """Filter autopilots by status."""

    status: Status | None = None


class VersionOut(BaseModel):
    """One immutable rule version: what changed, the snapshot, and who published it."""

    id: UUID
    version: int
    change: str
    config: dict[str, Any]
    digest: str
    publisher_type: Literal["member", "system"]
    publisher_id: UUID | None
    created_at: datetime


class VersionPage(Page[VersionOut]):
    """A page of rule versions, oldest first."""


class CollaboratorIn(BaseModel):
    """A member to give write access to."""

    model_config = ConfigDict(extra="forbid")
    member_id: UUID


class CollaboratorOut(BaseModel):
    """A member with write access to the autopilot."""

    member_id: UUID
    name: str
    role: Literal["owner", "admin", "member"]
    added_by: UUID | None
    added_at: datetime


class CollaboratorPage(Page[CollaboratorOut]):
    """A page of collaborators."""


async def autopilot_out(conn: Conn, row: asyncpg.Record) -> AutopilotOut:
    """Render an autopilot with its current version number."""
    version = await conn.fetchrow(Q.rule_version_current, row["id"])
    return AutopilotOut(
        id=row["id"], title=row["title"], instructions=row["instructions"],
        assignee=Assignee(type=row["assignee_type"], id=row["assignee_id"]), execution_mode=row["execution_mode"],
        status=row["status"], issue_title_template=row["issue_title_template"],
        run_timeout_s=row["run_timeout_s"], created_by=row["created_by"],
        created_at=row["created_at"], updated_at=row["updated_at"], version=version["version"] if version else 0,
    )


async def _check_assignee(call: Call, assignee: Assignee) -> None:
    """The assignee exists here, and a private agent is only assigned by its owner (ARCHITECTURE §6)."""
    if not await call.conn.fetchval(Q.assignee_exists, call.principal.workspace_id, assignee.type, assignee.id):
        raise ApiError(422, "invalid_assignee", f"no live {assignee.type} {assignee.id} in this workspace")
    if assignee.type == "agent":
        agent = await call.conn.fetchrow(Q.agent_get, call.principal.workspace_id, assignee.id)
        if agent is not None and agent["visibility"] == "private" and agent["owner_id"] != call.principal.member_id:
            raise ApiError(422, "invalid_assignee", "a private agent can only be assigned by its owner")


@api.add("POST", "/v1/autopilots", summary="Create an autopilot", response=AutopilotOut, status=201,
         body=AutopilotIn)
async def create_autopilot(call: Call) -> AutopilotOut:
    """Any member may create an autopilot; they are its creator (a writer) and publish version 1."""
    body: AutopilotIn = call.body
    await _check_assignee(call, body.assignee)
    row, _ = await rules.create_autopilot(
        call.conn, workspace_id=call.principal.workspace_id, creator_id=call.principal.member_id,
        title=body.title, assignee_type=body.assignee.type, assignee_id=body.assignee.id,
        execution_mode=body.execution_mode, instructions=body.instructions,
        issue_title_template=body.issue_title_template, run_timeout_s=body.run_timeout_s)
    return await autopilot_out(call.conn, row)


@api.add("GET", "/v1/autopilots", summary="List autopilots", response=AutopilotPage, query=AutopilotQuery)
async def list_autopilots(call: Call) -> dict[str, Any]:
    """Autopilots of the workspace, oldest first."""
    q: AutopilotQuery = call.query
    rows = await call.conn.fetch(Q.autopilot_list, call.principal.workspace_id, q.status,
                                 pagination.uuid_after(q), q.limit + 1)
    shown = {r["id"]: await autopilot_out(call.conn, r) for r in rows[: q.limit]}  # each with its version
    return pagination.page(rows, q.limit, lambda r: shown[r["id"]], lambda r: r["id"])


@api.add("GET", "/v1/autopilots/{autopilot_id}", summary="Get an autopilot", response=AutopilotOut)
async def get_autopilot(call: Call) -> AutopilotOut:
    """One autopilot (every member may read it)."""
    return await autopilot_out(call.conn, await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"]))


@api.add("PATCH", "/v1/autopilots/{autopilot_id}", summary="Edit an autopilot", response=AutopilotOut,
         body=AutopilotPatch)
async def edit_autopilot(call: Call) -> AutopilotOut:
    """Writers only. A real change publishes a version and makes the editor every trigger's publisher."""
    body: AutopilotPatch = call.body
    row = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
    await auth.require_writer(call.conn, call.principal, row)
    changes = patch_fields(body, nullable=("instructions", "issue_title_template", "run_timeout_s"))
    if "instructions" in changes and changes["instructions"] is None:
        changes["instructions"] = ""
    if body.assignee is not None:
        await _check_assignee(call, body.assignee)
        del changes["assignee"]
        changes |= {"assignee_type": body.assignee.type, "assignee_id": body.assignee.id}
    try:
        updated, _ = await editing.edit_autopilot(call.conn, row["id"], changes,
                                                  Publisher.member(call.principal.member_id))
    except editing.EditError as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    return await autopilot_out(call.conn, updated)


def _status_verb(verb: str) -> Any:
    async def change_status(call: Call) -> AutopilotOut:
        row = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
        await auth.require_writer(call.conn, call.principal, row)
        try:
            publisher = Publisher.member(call.principal.member_id)
            updated, _ = await editing.set_status(call.conn, row["id"], verb, publisher)
        except editing.EditError as exc:
            raise ApiError(409, exc.code, str(exc)) from None
        return await autopilot_out(call.conn, updated)

    change_status.__name__ = f"{verb}_autopilot"
    change_status.__doc__ = (f"Writers only: {verb} the autopilot (a new rule version when the status changes; "
                             "archived is final).")
    return change_status


for _verb in editing.STATUS_VERBS:
    api.add("POST", f"/v1/autopilots/{{autopilot_id}}/{_verb}", summary=f"{_verb.capitalize()} an autopilot",
            response=AutopilotOut)(_status_verb(_verb))


@api.add("GET", "/v1/autopilots/{autopilot_id}/versions", summary="List rule versions", response=VersionPage,
         query=PageQuery)
async def list_versions(call: Call) -> dict[str, Any]:
    """The autopilot's immutable rule versions, oldest first."""
    q: PageQuery = call.query
    row = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
    return await pagination.fetch(call.conn, Q.rule_version_list, q, lambda r: VersionOut.model_validate(dict(r)),
                                  row["id"])


@api.add("GET", "/v1/autopilots/{autopilot_id}/collaborators", summary="List collaborators",
         response=CollaboratorPage, query=PageQuery)
async def list_collaborators(call: Call) -> dict[str, Any]:
    """Members with write access through collaboration."""
    q: PageQuery = call.query
    row = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
    rows = await call.conn.fetch(Q.collaborator_list, row["id"], pagination.uuid_after(q), q.limit + 1)
    return pagination.page(rows, q.limit, lambda r: CollaboratorOut.model_validate(dict(r)), lambda r: r["member_id"])


@api.add("POST", "/v1/autopilots/{autopilot_id}/collaborators", summary="Add a collaborator",
         response=CollaboratorOut, status=201, body=CollaboratorIn)
async def add_collaborator(call: Call) -> CollaboratorOut:
    """Creator, owners and admins only. Adding someone twice is harmless."""
    body: CollaboratorIn = call.body
    row = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
    auth.require_collaborator_manager(call.principal, row)
    if await call.conn.fetchrow(Q.member_get, call.principal.workspace_id, body.member_id) is None:
        raise ApiError(422, "invalid_request", f"member {body.member_id} does not exist in this workspace")
    await editing.add_collaborator(call.conn, row, body.member_id, call.principal.member_id)
    found = await call.conn.fetch(Q.collaborator_list, row["id"], None, 10_000)
    return next(CollaboratorOut.model_validate(dict(r)) for r in found if r["member_id"] == body.member_id)


@api.add("DELETE", "/v1/autopilots/{autopilot_id}/collaborators/{member_id}", summary="Remove a collaborator",
         response=CollaboratorPage)
async def remove_collaborator(call: Call) -> dict[str, Any]:
    """Creator, owners and admins only; answers the remaining collaborators (first page)."""
    row = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
    auth.require_collaborator_manager(call.principal, row)
    if not await editing.remove_collaborator(call.conn, row, call.path["member_id"], call.principal.member_id):
        raise auth.not_found("collaborator")
    rows = await call.conn.fetch(Q.collaborator_list, row["id"], None, 51)
    return pagination.page(rows, 50, lambda r: CollaboratorOut.model_validate(dict(r)), lambda r: r["member_id"])
