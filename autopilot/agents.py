"""Agents (HTTP endpoints we push to, or runtimes that pull with ``hgr_`` tokens) and squads."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import asyncpg

from hookgate import crypto
from hookgate.database import Conn, one
from sql import Q

RUNTIME_TOKEN_PREFIX = "hgr_"
#: After a rotation, pushes are signed with the old signing secret too for this long (seconds).
ROTATION_GRACE_S = 24 * 3600


@dataclass(frozen=True)
class NewAgent:
    """A created agent with the credential shown once: ``signing_secret`` (http) or ``runtime_token`` (pull)."""

    row: asyncpg.Record
    signing_secret: str | None = None
    runtime_token: str | None = None


def secret_context(agent_id: UUID) -> str:
    """AAD binding an agent's signing-secret ciphertext to that agent."""
    return f"agent:{agent_id}:signing_secret"


async def create_http_agent(
    conn: Conn, keyring: crypto.Keyring, *, workspace_id: UUID, owner_id: UUID, name: str,
    url: str, timeout_s: float = 10.0, visibility: str = "workspace", max_concurrency: int = 4,
) -> NewAgent:
    """Create an HTTP agent with a generated ``whsec_`` secret, stored encrypted, bound to the new id."""
    secret = crypto.new_signing_secret()
    async with conn.transaction():
        # The id is needed for the AAD, so insert with a placeholder ciphertext, then seal it to the row.
        row = one(await conn.fetchrow(
            Q.agent_insert_http, workspace_id, name, owner_id, visibility, url, timeout_s,
            b"\x00", crypto.hint(secret), max_concurrency,
        ))
        sealed = keyring.encrypt(secret, secret_context(row["id"]))
        row = one(await conn.fetchrow(Q.agent_set_signing_secret, row["id"], sealed))
    return NewAgent(row, signing_secret=secret)


@dataclass(frozen=True)
class AgentChange:
    """The fields of an agent edit; None keeps the current value."""

    name: str | None = None
    url: str | None = None
    timeout_s: float | None = None
    max_concurrency: int | None = None
    visibility: str | None = None
    #: Seconds between attempts; ``[]`` puts the agent back on the default schedule (None keeps it).
    retry_schedule: list[float] | None = None


async def update_agent(conn: Conn, agent_id: UUID, change: AgentChange) -> asyncpg.Record:
    """Apply an edit; a new cap reshapes the concurrency slots at once, running tasks kept and counted."""
    async with conn.transaction():
        row = one(await conn.fetchrow(Q.agent_update, agent_id, change.name, change.url, change.timeout_s,
                                      change.max_concurrency, change.visibility, change.retry_schedule))
        if change.max_concurrency is not None:
            await conn.execute(Q.agent_slots_resize, agent_id)
    return row


async def rotate_signing_secret(
    conn: Conn, keyring: crypto.Keyring, agent_id: UUID, grace_s: int = ROTATION_GRACE_S,
) -> tuple[asyncpg.Record, str]:
    """Give an http agent a new ``whsec_`` secret; the old one still signs pushes for ``grace_s`` seconds."""
    secret = crypto.new_signing_secret()
    sealed = keyring.encrypt(secret, secret_context(agent_id))
    row = one(await conn.fetchrow(Q.agent_rotate_signing_secret, agent_id, sealed, crypto.hint(secret), grace_s))
    return row, secret


async def create_pull_agent(
    conn: Conn, *, workspace_id: UUID, owner_id: UUID, name: str,
    visibility: str = "workspace", max_concurrency: int = 4,
) -> NewAgent:
    """Create a pull agent; its ``hgr_`` runtime token is returned once and stored as a digest."""
    token = crypto.new_token(RUNTIME_TOKEN_PREFIX)
    row = one(await conn.fetchrow(
        Q.agent_insert_pull, workspace_id, name, owner_id, visibility,
        crypto.digest(token), crypto.hint(token), max_concurrency,
    ))
    return NewAgent(row, runtime_token=token)


async def create_squad(
    conn: Conn, *, workspace_id: UUID, name: str, leader_id: UUID, member_ids: list[UUID]
) -> asyncpg.Record:
    """A squad led by ``leader_id``; work assigned to the squad goes to its leader."""
    async with conn.transaction():
        squad = one(await conn.fetchrow(Q.squad_insert, workspace_id, name, leader_id))
        for agent_id in {leader_id, *member_ids}:
            await conn.execute(Q.squad_member_insert, squad["id"], agent_id)
    return squad
