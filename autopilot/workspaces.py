"""Workspaces, members and API keys (``hgk_``): bootstrap, key issue and key authentication."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import asyncpg

from autopilot import audit
from hookgate import crypto
from hookgate.database import Conn, one
from sql import Q

API_KEY_PREFIX = "hgk_"
ROLES = ("owner", "admin", "member")


@dataclass(frozen=True)
class Principal:
    """The member behind an API key, as every admin endpoint sees it."""

    key_id: UUID
    member_id: UUID
    workspace_id: UUID
    role: str
    name: str

    @property
    def is_admin(self) -> bool:
        """Owners and admins may manage the whole workspace."""
        return self.role in ("owner", "admin")


@dataclass(frozen=True)
class Bootstrap:
    """What ``hookgate bootstrap`` prints: the workspace, its owner, and a fresh key (shown once)."""

    workspace_id: UUID
    member_id: UUID
    api_key: str
    created: bool


async def issue_key(
    conn: Conn, workspace_id: UUID, member_id: UUID, actor_id: UUID | None = None
) -> tuple[UUID, str]:
    """Create an API key for a member; returns ``(key id, key)``. Only the digest is stored.

    ``actor_id`` is the member who asked for it through the API (None: the system, e.g. bootstrap).
    """
    key = crypto.new_token(API_KEY_PREFIX)
    row = one(await conn.fetchrow(Q.api_key_insert, workspace_id, member_id, crypto.digest(key), crypto.hint(key)))
    await audit.record(
        conn, "KEY_CREATE", actor_type="system" if actor_id is None else "member", actor_id=actor_id,
        subject_type="api_key",
        subject_id=row["id"], workspace_id=workspace_id, detail={"member_id": str(member_id)},
    )
    return row["id"], key


async def bootstrap(conn: Conn, name: str = "default") -> Bootstrap:
    """Idempotent per workspace name: create it and its owner once; every call issues a new owner key."""
    async with conn.transaction():
        row = one(await conn.fetchrow(Q.workspace_get_or_create, name))
        workspace_id, created = row["id"], row["created"]
        owner_id = None if created else await conn.fetchval(Q.workspace_first_owner, workspace_id)
        if owner_id is None:
            owner = one(await conn.fetchrow(Q.member_insert, workspace_id, "owner", None, "owner"))
            owner_id = owner["id"]
        _, key = await issue_key(conn, workspace_id, owner_id)
    return Bootstrap(workspace_id, owner_id, key, created)


async def add_member(
    conn: Conn, workspace_id: UUID, name: str, role: str, email: str | None = None, actor_id: UUID | None = None
) -> tuple[asyncpg.Record, str]:
    """Add a member with a first API key; returns ``(member row, key)``. ``actor_id``: who added them."""
    member = one(await conn.fetchrow(Q.member_insert, workspace_id, name, email, role))
    _, key = await issue_key(conn, workspace_id, member["id"], actor_id)
    return member, key


async def authenticate(conn: Conn, key: str) -> Principal | None:
    """The live member behind an ``hgk_`` key, or None (malformed keys cost no query)."""
    if not crypto.token_shape_ok(key, API_KEY_PREFIX):
        return None
    row = await conn.fetchrow(Q.api_key_authenticate, crypto.digest(key))
    if row is None:
        return None
    return Principal(row["key_id"], row["member_id"], row["workspace_id"], row["role"], row["name"])
