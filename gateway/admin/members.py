"""Members and their API keys: ``/v1/me``, ``/v1/members``, ``/v1/members/{id}/keys``, ``/v1/keys``.

Only owners and admins add members, and only owners add owners. A key is shown once, at creation; after
that only its last four characters. A member may mint and revoke their own keys; owners and admins
anyone's in the workspace. Revocation is audited (KEY_REVOKE) and takes effect on the next request.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from autopilot import editing, workspaces
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints
from gateway.admin.pagination import PageQuery
from gateway.errors import ApiError
from sql import Q

api = Endpoints("Members and keys")
Role = Literal["owner", "admin", "member"]


class MemberIn(BaseModel):
    """A new member: name, optional email, role."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    email: str | None = Field(default=None, max_length=320)
    role: Role = "member"


class MemberOut(BaseModel):
    """A member of the workspace."""

    id: UUID
    name: str
    email: str | None
    role: Role
    created_at: datetime
    disabled_at: datetime | None


class NewMember(MemberOut):
    """A created member with their first API key (shown once)."""

    api_key: str


class Me(BaseModel):
    """The caller: member, workspace and the key in use."""

    member_id: UUID
    workspace_id: UUID
    name: str
    role: Role
    key_id: UUID


class KeyOut(BaseModel):
    """An API key's metadata (never the key itself after creation)."""

    id: UUID
    member_id: UUID
    hint: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class NewKey(BaseModel):
    """A created key, shown once."""

    id: UUID
    member_id: UUID
    api_key: str


class MemberPage(BaseModel):
    """A page of members."""

    items: list[MemberOut]
    next_cursor: str | None


class KeyPage(BaseModel):
    """A page of keys."""

    items: list[KeyOut]
    next_cursor: str | None


class KeyQuery(PageQuery):
    """Filter keys by member."""

    member_id: UUID | None = None


def member_out(row: asyncpg.Record) -> MemberOut:
    """Render a member row."""
    return MemberOut.model_validate(dict(row))


def key_out(row: asyncpg.Record) -> KeyOut:
    """Render a key row."""
    return KeyOut.model_validate(dict(row))


@api.add("GET", "/v1/me", summary="The caller", response=Me)
async def get_me(call: Call) -> Me:
    """The member behind the API key in use."""
    p = call.principal
    return Me(member_id=p.member_id, workspace_id=p.workspace_id, name=p.name, role=p.role,  # type: ignore[arg-type]
              key_id=p.key_id)


@api.add("POST", "/v1/members", summary="Add a member", response=NewMember, status=201, body=MemberIn)
async def create_member(call: Call) -> NewMember:
    """Owners and admins add members; only owners add owners. The member's first key is returned once."""
    body: MemberIn = call.body
    auth.require_admin(call.principal, "add members")
    if body.role == "owner" and call.principal.role != "owner":
        raise ApiError(403, "forbidden", "only owners may add owners")
    async with call.conn.transaction():
        row, key = await workspaces.add_member(call.conn, call.principal.workspace_id, body.name, body.role,
                                               body.email, actor_id=call.principal.member_id)
    return NewMember.model_validate(dict(row) | {"disabled_at": None, "api_key": key})


@api.add("GET", "/v1/members", summary="List members", response=MemberPage, query=PageQuery)
async def list_members(call: Call) -> dict[str, Any]:
    """Members of the workspace, oldest first."""
    q: PageQuery = call.query
    rows = await call.conn.fetch(Q.member_list_page, call.principal.workspace_id, pagination.uuid_after(q),
                                 q.limit + 1)
    return pagination.page(rows, q.limit, member_out, lambda r: r["id"])


@api.add("GET", "/v1/members/{member_id}", summary="Get a member", response=MemberOut)
async def get_member(call: Call) -> MemberOut:
    """One member of the workspace."""
    row = await call.conn.fetchrow(Q.member_get, call.principal.workspace_id, call.path["member_id"])
    if row is None:
        raise auth.not_found("member")
    return member_out(row)


@api.add("POST", "/v1/members/{member_id}/keys", summary="Create an API key", response=NewKey, status=201)
async def create_key(call: Call) -> NewKey:
    """A new key for a member (yourself, or anyone if you are an owner/admin), shown once."""
    member_id = call.path["member_id"]
    row = await call.conn.fetchrow(Q.member_get, call.principal.workspace_id, member_id)
    if row is None:
        raise auth.not_found("member")
    if member_id != call.principal.member_id:
        auth.require_admin(call.principal, "create keys for other members")
    async with call.conn.transaction():
        key_id, key = await workspaces.issue_key(call.conn, call.principal.workspace_id, member_id,
                                                 actor_id=call.principal.member_id)
    return NewKey(id=key_id, member_id=member_id, api_key=key)


@api.add("GET", "/v1/keys", summary="List API keys", response=KeyPage, query=KeyQuery)
async def list_keys(call: Call) -> dict[str, Any]:
    """Keys of the workspace (members see their own; owners and admins everyone's)."""
    q: KeyQuery = call.query
    member = q.member_id if call.principal.is_admin else call.principal.member_id
    rows = await call.conn.fetch(Q.api_key_list, call.principal.workspace_id, member, pagination.uuid_after(q),
                                 q.limit + 1)
    return pagination.page(rows, q.limit, key_out, lambda r: r["id"])


async def _key(call: Call) -> asyncpg.Record:
    row = await call.conn.fetchrow(Q.api_key_get, call.principal.workspace_id, call.path["key_id"])
    if row is None:
        raise auth.not_found("key")
    if row["member_id"] != call.principal.member_id:
        auth.require_admin(call.principal, "manage other members' keys")
    return row


@api.add("GET", "/v1/keys/{key_id}", summary="Get an API key", response=KeyOut)
async def get_key(call: Call) -> KeyOut:
    """One key's metadata."""
    return key_out(await _key(call))


@api.add("DELETE", "/v1/keys/{key_id}", summary="Revoke an API key", response=KeyOut)
async def revoke_key(call: Call) -> KeyOut:
    """Revoke a key (KEY_REVOKE); it stops working on the next request. Revoking twice is harmless."""
    row = await _key(call)
    if row["revoked_at"] is None:
        await editing.revoke_key(call.conn, call.principal.workspace_id, row["id"], call.principal.member_id)
    return key_out(await _key(call))
