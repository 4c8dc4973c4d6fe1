"""Who is calling and what they may do (ARCHITECTURE §9).

The caller is the member behind a bearer ``hgk_`` key. Every lookup is scoped by that key's workspace, so
another workspace's ids are simply not found (404, never 403: existence is not leaked). Members and keys
follow the role hierarchy owner > admin > member (``autopilot.workspaces``). Writing an
autopilot (and seeing its triggers' tokens and URLs) is for its creator, workspace owners and admins, and
its collaborators; managing collaborators is for the creator, owners and admins.

Key guessing is charged to the caller address's bad-credential debt (:mod:`gateway.debt`), shared with the
webhook ingress: the endpoint refuses an address over the cap (429, :func:`gateway.debt.admitted`) before
any database work, and :func:`authenticate` charges each refused key (missing, malformed, unknown, revoked).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

import asyncpg
from starlette.requests import Request

from autopilot import workspaces
from autopilot.workspaces import Principal
from gateway import debt
from gateway.errors import ApiError
from hookgate.database import Conn
from sql import Q

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="hookgate"'}


async def authenticate(conn: Conn, request: Request, debtor: debt.Debtor) -> Principal:
    """The live member behind the request's bearer key, or 401 (charged to ``debtor``)."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise debtor.refuse(ApiError(401, "unauthorized", "send an API key as 'Authorization: Bearer hgk_…'",
                                     _CHALLENGE))
    principal = await workspaces.authenticate(conn, key.strip())
    if principal is None:
        raise debtor.refuse(ApiError(401, "unauthorized", "unknown or revoked API key", _CHALLENGE))
    return principal


def require_admin(principal: Principal, action: str) -> None:
    """403 unless the caller is a workspace owner or admin."""
    if not principal.is_admin:
        raise ApiError(403, "forbidden", f"only workspace owners and admins may {action}")


def require_keys_of(principal: Principal, member_id: UUID, role: str) -> None:
    """403 unless the keys are the caller's own or a member's whose role is at most the caller's."""
    if not principal.may_manage_keys_of(member_id, role):
        raise ApiError(403, "forbidden", f"only owners, and admins up to their own role, may manage a {role}'s keys")


#: The HTTP answer to each refusal of a member or key change.
_MEMBER_ERRORS = {"not_found": 404, "forbidden": 403, "last_owner": 409}


@contextmanager
def member_errors() -> Iterator[None]:
    """Answer a refused member or key change (:class:`workspaces.MemberError`) with its status and code."""
    try:
        yield
    except workspaces.MemberError as exc:
        raise ApiError(_MEMBER_ERRORS[exc.code], exc.code, str(exc)) from exc


def not_found(kind: str) -> ApiError:
    """The one answer for a missing id and for another workspace's id."""
    return ApiError(404, "not_found", f"no such {kind}")


def found(row: asyncpg.Record | None, kind: str) -> asyncpg.Record:
    """``row`` as a lookup scoped to the caller's workspace returned it, or that one 404 if it found none."""
    if row is None:
        raise not_found(kind)
    return row


async def autopilot_of(conn: Conn, principal: Principal, autopilot_id: UUID) -> asyncpg.Record:
    """The caller's workspace's autopilot, or 404."""
    return found(await conn.fetchrow(Q.autopilot_get, principal.workspace_id, autopilot_id), "autopilot")


async def can_write(conn: Conn, principal: Principal, autopilot: asyncpg.Record) -> bool:
    """Creator, owner/admin, or collaborator."""
    if principal.is_admin or autopilot["created_by"] == principal.member_id:
        return True
    return bool(await conn.fetchval(Q.collaborator_exists, autopilot["id"], principal.member_id))


async def may_read_answers(conn: Conn, principal: Principal, autopilot_id: UUID | None) -> bool:
    """Whether the caller may read what an agent answered a task: a writer of its autopilot (none: admins)."""
    if autopilot_id is None:
        return principal.is_admin
    return await can_write(conn, principal, await autopilot_of(conn, principal, autopilot_id))


async def require_writer(conn: Conn, principal: Principal, autopilot: asyncpg.Record) -> None:
    """403 unless the caller may write this autopilot."""
    if not await can_write(conn, principal, autopilot):
        raise ApiError(403, "forbidden", "only the autopilot's creator, collaborators, owners and admins may do this")


def require_collaborator_manager(principal: Principal, autopilot: asyncpg.Record) -> None:
    """403 unless the caller is the autopilot's creator, an owner or an admin."""
    if not (principal.is_admin or autopilot["created_by"] == principal.member_id):
        raise ApiError(403, "forbidden", "only the autopilot's creator, owners and admins manage collaborators")
