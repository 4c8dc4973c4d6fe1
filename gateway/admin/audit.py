"""The audit log, read-only: who did what to which subject (owners and admins only)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, Field

from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints
from gateway.admin.pagination import Page, PageQuery
from sql import Q

api = Endpoints("Audit")


class AuditOut(BaseModel):
    """One append-only audit entry."""

    id: int
    at: datetime
    action: str
    actor_type: str
    actor_id: str | None
    subject_type: str
    subject_id: str | None
    detail: dict[str, Any]


class AuditPage(Page[AuditOut]):
    """A page of audit entries, newest first."""


class AuditQuery(PageQuery):
    """Filter by subject id and action (TOKEN_ROTATE, SECRET_SET, PUBLISH, REPLAY, KEY_REVOKE, …)."""

    subject_id: str | None = Field(default=None, max_length=200)
    action: str | None = Field(default=None, max_length=100)


def audit_out(row: asyncpg.Record) -> AuditOut:
    """Render an audit row."""
    return AuditOut.model_validate(dict(row))


@api.add("GET", "/v1/audit", summary="Query the audit log", response=AuditPage, query=AuditQuery)
async def list_audit(call: Call) -> dict[str, Any]:
    """Owners and admins: the workspace's audit entries, newest first."""
    q: AuditQuery = call.query
    auth.require_admin(call.principal, "read the audit log")
    rows = await call.conn.fetch(Q.audit_list, call.principal.workspace_id, q.subject_id, q.action,
                                 pagination.int_after(q), q.limit + 1)
    return pagination.page(rows, q.limit, audit_out, lambda r: r["id"])
