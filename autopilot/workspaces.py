"""Workspaces, members and API keys (``hgk_``): bootstrap, keys, roles, and the last owner's safety.

Roles rank owner > admin > member. Owners and admins manage members (their keys, role, disabled state)
whose role is at most their own, and grant no role above their own; everyone manages their own keys.
No change may leave a workspace without an active owner holding a live key (:class:`MemberError`
``last_owner``); such changes lock the workspace's owner rows first, so they run one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import asyncpg

from autopilot import audit
from hookgate import crypto
from hookgate.database import Conn, one
from hookgate.errors import Refused
from sql import Q

API_KEY_PREFIX = "hgk_"
ROLES = ("owner", "admin", "member")
#: A role's rank: a caller manages members whose role ranks at most their own (members: nobody else).
RANKS = {"owner": 3, "admin": 2, "member": 1}


class MemberError(Refused):
    """A member or key change refused: ``code`` is ``not_found``, ``forbidden`` or ``last_owner``."""


@dataclass(frozen=True)
class MemberChange:
    """A change to a member: a new role and/or disabled state (None leaves it as it is)."""

    role: str | None = None
    disabled: bool | None = None


def may_manage(actor_role: str, target_role: str) -> bool:
    """Whether an owner or admin may manage (or grant) ``target_role``: at most their own role."""
    return actor_role in ("owner", "admin") and RANKS[target_role] <= RANKS[actor_role]


def manageable_roles(actor_role: str) -> list[str]:
    """The roles whose members (and keys) ``actor_role`` may manage; empty for plain members."""
    return [role for role in ROLES if may_manage(actor_role, role)]


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
        """Owners and admins may manage the workspace (members only up to their own role)."""
        return self.role in ("owner", "admin")

    def may_manage_keys_of(self, member_id: UUID, role: str) -> bool:
        """One's own keys, or those of a member whose role is at most one's own (owners and admins)."""
        return member_id == self.member_id or may_manage(self.role, role)


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


async def change_member(
    conn: Conn, workspace_id: UUID, member_id: UUID, change: MemberChange, actor_id: UUID
) -> asyncpg.Record:
    """Apply ``change`` to a member as ``actor_id``, within the hierarchy and audited; returns the member."""
    async with conn.transaction():
        locked = await _lock_for_change(conn, workspace_id, actor_id, member_id)
        target = locked.get(member_id)
        if target is None:
            raise MemberError("not_found", "no such member")
        actor_role = _active_role(locked.get(actor_id))
        if not may_manage(actor_role, target["role"]):
            raise MemberError("forbidden", f"a member with role {actor_role} cannot change a {target['role']}")
        if change.role is not None and not may_manage(actor_role, change.role):
            raise MemberError("forbidden", f"a member with role {actor_role} cannot grant the role {change.role}")
        disabled = target["disabled_at"] is not None if change.disabled is None else change.disabled
        row = one(await conn.fetchrow(Q.member_update, workspace_id, member_id, change.role or target["role"],
                                      disabled))
        await _audit_change(conn, workspace_id, actor_id, target, row)
        await _keep_an_owner(conn, workspace_id, target)
    return row


async def revoke_key(conn: Conn, workspace_id: UUID, key_id: UUID, actor_id: UUID) -> asyncpg.Record:
    """Revoke a key as ``actor_id`` (KEY_REVOKE); revoking twice is harmless. Returns the key."""
    async with conn.transaction():
        key = await conn.fetchrow(Q.api_key_get, workspace_id, key_id)
        if key is None:
            raise MemberError("not_found", "no such key")
        locked = await _lock_for_change(conn, workspace_id, actor_id, key["member_id"])
        holder = locked[key["member_id"]]
        if key["member_id"] != actor_id and not may_manage(_active_role(locked.get(actor_id)), holder["role"]):
            raise MemberError("forbidden", f"only owners, and admins up to their own role, may revoke a "
                                           f"{holder['role']}'s keys")
        if await conn.fetchrow(Q.api_key_revoke, workspace_id, key_id) is not None:
            await audit.record(conn, "KEY_REVOKE", actor_type="member", actor_id=actor_id, subject_type="api_key",
                               subject_id=key_id, workspace_id=workspace_id,
                               detail={"member_id": str(key["member_id"])})
            await _keep_an_owner(conn, workspace_id, holder)
        return one(await conn.fetchrow(Q.api_key_get, workspace_id, key_id))


async def _lock_for_change(conn: Conn, workspace_id: UUID, *member_ids: UUID) -> dict[UUID, asyncpg.Record]:
    """Lock the workspace's owners and ``member_ids`` (fixed order); their current rows by id."""
    rows = await conn.fetch(Q.member_lock_for_change, workspace_id, list(member_ids))
    return {row["id"]: row for row in rows}


def _active_role(actor: asyncpg.Record | None) -> str:
    # Read under the lock: an actor demoted or disabled since their request authenticated has lost the role.
    if actor is None or actor["disabled_at"] is not None:
        return "none"
    return str(actor["role"])


async def _keep_an_owner(conn: Conn, workspace_id: UUID, before: asyncpg.Record) -> None:
    """After a change to ``before`` (an owner's row as it was): refuse it if no owner could sign in now."""
    if before["role"] != "owner" or before["disabled_at"] is not None:
        return  # only an active owner's change can take the last way in away
    if not await conn.fetchval(Q.member_owner_can_sign_in, workspace_id):
        raise MemberError("last_owner", "the workspace must keep an active owner with a live API key")


async def _audit_change(conn: Conn, workspace_id: UUID, actor_id: UUID, before: asyncpg.Record,
                        after: asyncpg.Record) -> None:
    """MEMBER_ROLE for a new role, MEMBER_DISABLE / MEMBER_ENABLE for a new state; nothing for no change."""
    entries = []
    if after["role"] != before["role"]:
        entries.append(("MEMBER_ROLE", {"from": before["role"], "to": after["role"]}))
    if (after["disabled_at"] is None) != (before["disabled_at"] is None):
        entries.append(("MEMBER_ENABLE" if after["disabled_at"] is None else "MEMBER_DISABLE", {}))
    for action, detail in entries:
        await audit.record(conn, action, actor_type="member", actor_id=actor_id, subject_type="member",
                           subject_id=after["id"], workspace_id=workspace_id, detail=detail)
