"""Alerts: the events an operator hears about, raised into the durable notification queue of the workspace.

:func:`emit` is what code that notices something calls, inside its own transaction: it inserts one queued
``notification`` row per channel of the workspace that hears the event (one INSERT … SELECT, an index probe
and nothing more when the workspace has no channel) and NOTIFYs the worker's alert sender, which delivers
after the commit (``worker.alerts``). So raising an event never waits on a receiver, and an event is sent
if and only if the change that raised it committed. Channels and their signing secrets are made here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from hookgate import crypto, notify
from hookgate.database import Conn, one
from sql import Q

RUN_FAILED = "run.failed"
AGENT_UNHEALTHY = "agent.unhealthy"
AGENT_RECOVERED = "agent.recovered"
AUTOPILOT_PAUSED = "autopilot.paused"
TRIGGER_REJECTIONS_SPIKE = "trigger.rejections_spike"
#: The events a channel may hear (the database checks the same list).
EVENTS = (RUN_FAILED, AGENT_UNHEALTHY, AGENT_RECOVERED, AUTOPILOT_PAUSED, TRIGGER_REJECTIONS_SPIKE)


@dataclass(frozen=True)
class NewChannel:
    """A created channel with its ``whsec_`` signing secret, shown once."""

    row: asyncpg.Record
    signing_secret: str


def secret_context(channel_id: UUID) -> str:
    """AAD binding a channel's signing-secret ciphertext to that channel."""
    return f"notification_channel:{channel_id}:signing_secret"


async def create_channel(
    conn: Conn, keyring: crypto.Keyring, *, workspace_id: UUID, name: str, url: str, events: list[str],
    created_by: UUID | None,
) -> NewChannel:
    """A channel with a generated ``whsec_`` secret, stored encrypted and bound to the new id."""
    secret = crypto.new_signing_secret()
    async with conn.transaction():
        # The id is needed for the AAD: insert with a placeholder ciphertext, then seal the secret to the row.
        row = one(await conn.fetchrow(Q.channel_insert, workspace_id, name, url, events, b"\x00",
                                      crypto.hint(secret), created_by))
        sealed = keyring.encrypt(secret, secret_context(row["id"]))
        row = one(await conn.fetchrow(Q.channel_set_secret, row["id"], sealed))
    return NewChannel(row, secret)


async def emit(conn: Conn, workspace_id: UUID, event: str, data: dict[str, Any]) -> int:
    """Queue ``event`` with ``data`` for every channel of the workspace that hears it; returns how many.

    Runs in the caller's transaction (the rows and the wake-up commit or roll back with the caller's change).
    """
    if event not in EVENTS:
        raise ValueError(f"unknown alert event {event!r}")
    rows = await conn.fetch(Q.notification_emit, workspace_id, event, data)
    if rows:
        await conn.execute(Q.notify_send, notify.ALERTS, str(rows[0]["id"]))
    return len(rows)


async def ping(conn: Conn, workspace_id: UUID, channel_id: UUID, data: dict[str, Any]) -> UUID | None:
    """Queue a ``ping`` to one channel of the workspace; its notification id, or None if no such channel."""
    notification_id: UUID | None = await conn.fetchval(Q.notification_ping, workspace_id, channel_id, data)
    if notification_id is not None:
        await conn.execute(Q.notify_send, notify.ALERTS, str(notification_id))
    return notification_id
