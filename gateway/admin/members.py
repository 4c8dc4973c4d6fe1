"""Members and their API keys: ``/v1/me``, ``/v1/members``, ``/v1/members/{id}/keys``, ``/v1/keys``.

Roles rank owner > admin > member (``autopilot.workspaces``). Owners and admins add, change and disable
members whose role is at most their own, and grant no role above it. Everyone mints, lists and revokes
their own keys; owners and admins also those of members up to their own role. A key is shown once, at
creation; after that only its last four characters. Revocations and member changes are audited and take
effect on the next request. The last active owner with a live key is never locked out (409 last_owner).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from autopilot import workspaces
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints, patch_fields
from gateway.admin.pagination import Page, PageQuery
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


class MemberPatch(BaseModel):
    """A change to a member: role and/or disabled (absent fields stay as they are)."""

    model_config = ConfigDict(extra="forbid")
    role: Role | None = None
    disabled: bool | None = None


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


class MemberPage(Page[MemberOut]):
    """A page of members."""


class KeyPage(Page[KeyOut]):
    """A page of keys."""


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
    """Owners and admins add members with a role up to their own. The member's first key is returned once."""
    body: MemberIn = call.body
    auth.require_admin(call.principal, "add members")
    if not workspaces.may_manage(call.principal.role, body.role):
        raise ApiError(403, "forbidden", f"a member with role {call.principal.role} cannot grant the role {body.role}")
    async with call.conn.transaction():
        row, key = await workspaces.add_member(call.conn, call.principal.workspace_id, body.name, body.role,
                                               body.email, actor_id=call.principal.member_id)
    return NewMember.model_validate(dict(row) | {"disabled_at": None, "api_key": key})


@api.add("GET", "/v1/members", summary="List members", response=MemberPage, query=PageQuery)
async def list_members(call: Call) -> dict[str, Any]:
    """Members of the workspace, oldest first."""
    q: PageQuery = call.query
    return await pagination.fetch(call.conn, Q.member_list_page, q, member_out, call.principal.workspace_id)


@api.add("GET", "/v1/members/{member_id}", summary="Get a member", response=MemberOut)
async def get_member(call: Call) -> MemberOut:
    """One member of the workspace."""
    return member_out(await call.scoped(Q.member_get, "member"))


@api.add("PATCH", "/v1/members/{member_id}", summary="Change a member's role or disabled state",
         response=MemberOut, body=MemberPatch)
async def update_member(call: Call) -> MemberOut:
    """Owners and admins change members up to their own role (MEMBER_ROLE, MEMBER_DISABLE, MEMBER_ENABLE).

    A disabled member's keys stop working at once. The last active owner with a live key cannot be demoted
    or disabled (409 ``last_owner``).
    """
    sent = patch_fields(call.body)
    change = workspaces.MemberChange(role=sent.get("role"), disabled=sent.get("disabled"))
    with auth.member_errors():
        row = await workspaces.change_member(call.conn, call.principal.workspace_id, call.path["member_id"], change,
                                             call.principal.member_id)
    return member_out(row)


@api.add("POST", "/v1/members/{member_id}/keys", summary="Create an API key", response=NewKey, status=201)
async def create_key(call: Call) -> NewKey:
    """A new key for yourself, or (owners, admins) for a member up to your own role, shown once."""
    member_id = call.path["member_id"]
    row = await call.scoped(Q.member_get, "member")
    auth.require_keys_of(call.principal, member_id, row["role"])
    async with call.conn.transaction():
        key_id, key = await workspaces.issue_key(call.conn, call.principal.workspace_id, member_id,
                                                 actor_id=call.principal.member_id)
    return NewKey(id=key_id, member_id=member_id, api_key=key)


@api.add("GET", "/v1/keys", summary="List API keys", response=KeyPage, query=KeyQuery)
async def list_keys(call: Call) -> dict[str, Any]:
    """Your own keys, and (owners, admins) those of members up to your own role."""
    q: KeyQuery = call.query
    p = call.principal
    if q.member_id is not None:
        row = await call.conn.fetchrow(Q.member_get, p.workspace_id, q.member_id)
        if row is not None:  # an unknown or foreign member simply has no keys to list
            auth.require_keys_of(p, q.member_id, row["role"])
    rows = await call.conn.fetch(Q.api_key_list, p.workspace_id, q.member_id, pagination.uuid_after(q),
                                 q.limit + 1, p.member_id, workspaces.manageable_roles(p.role))
    return pagination.page(rows, q.limit, key_out, lambda r: r["id"])


@api.add("GET", "/v1/keys/{key_id}", summary="Get an API key", response=KeyOut)
async def get_key(call: Call) -> KeyOut:
    """One key's metadata: your own, or (owners, admins) a member's up to your own role."""
    row = await call.scoped(Q.api_key_get, "key")
    auth.require_keys_of(call.principal, row["member_id"], row["member_role"])
    return key_out(row)


@api.add("DELETE", "/v1/keys/{key_id}", summary="Revoke an API key", response=KeyOut)
async def revoke_key(call: Call) -> KeyOut:
    """Revoke a key (KEY_REVOKE); it stops working on the next request. Revoking twice is harmless.

    Your own, or (owners, admins) a member's up to your own role; never the last live key of the last
    active owner (409 ``last_owner``).
    """
    with auth.member_errors():
        row = await workspaces.revoke_key(call.conn, call.principal.workspace_id, call.path["key_id"],
                                          call.principal.member_id)
    return key_out(row)
