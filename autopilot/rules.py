"""Autopilots, their immutable rule versions, and their triggers (webhook tokens, schedules)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import audit
from hookgate import crypto
from hookgate.database import Conn, one
from sql import Q

WEBHOOK_TOKEN_PREFIX = "awt_"


@dataclass(frozen=True)
class Publisher:
    """Who publishes a rule change: a member, or the system (auto-pause)."""

    type: str
    id: UUID | None

    @classmethod
    def member(cls, member_id: UUID) -> Publisher:
        """A member acting through the API or CLI."""
        return cls("member", member_id)

    @classmethod
    def system(cls) -> Publisher:
        """Hookgate itself (auto-pause)."""
        return cls("system", None)


def snapshot(autopilot: asyncpg.Record) -> dict[str, Any]:
    """The substantive configuration of an autopilot, as recorded in a rule version."""
    keys = ("title", "instructions", "assignee_type", "assignee_id", "execution_mode", "status",
            "issue_title_template", "run_timeout_s")
    return {k: (str(autopilot[k]) if isinstance(autopilot[k], UUID) else autopilot[k]) for k in keys}


def config_digest(config: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a snapshot, so equal rules have equal digests."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


async def publish(
    conn: Conn, autopilot_id: UUID, change: str, publisher: Publisher,
    extra: dict[str, Any] | None = None,
) -> asyncpg.Record:
    """Append the next rule version (same transaction as the change) and a PUBLISH audit entry."""
    autopilot = one(await conn.fetchrow(Q.autopilot_get_any, autopilot_id))
    config = snapshot(autopilot) | (extra or {})
    version = one(await conn.fetchrow(
        Q.rule_version_insert, autopilot_id, change, config, config_digest(config), publisher.type, publisher.id
    ))
    await audit.record(
        conn, "PUBLISH", actor_type=publisher.type, actor_id=publisher.id, subject_type="autopilot",
        subject_id=autopilot_id, workspace_id=autopilot["workspace_id"],
        detail={"change": change, "version": version["version"]},
    )
    return version


async def create_autopilot(
    conn: Conn, *, workspace_id: UUID, creator_id: UUID, title: str, assignee_type: str,
    assignee_id: UUID, execution_mode: str, instructions: str = "", issue_title_template: str | None = None,
    run_timeout_s: int | None = None,
) -> tuple[asyncpg.Record, asyncpg.Record]:
    """Create an active autopilot and its first rule version; returns ``(autopilot, version)``.

    ``run_timeout_s``: a run not finished that long after its creation (or retry) fails ``deadline_exceeded``.
    """
    async with conn.transaction():
        row = one(await conn.fetchrow(
            Q.autopilot_insert, workspace_id, title, instructions, assignee_type, assignee_id,
            execution_mode, issue_title_template, creator_id, run_timeout_s,
        ))
        version = await publish(conn, row["id"], "create", Publisher.member(creator_id))
    return row, version


def token_context(token_digest: bytes) -> str:
    """AAD binding a trigger token's ciphertext to its digest (and so to its row)."""
    return "trigger-token:" + token_digest.hex()


def signing_secret_context(trigger_id: UUID) -> str:
    """AAD binding a trigger's signing-secret ciphertext to that trigger."""
    return f"trigger:{trigger_id}:signing_secret"


def verify_token_context(trigger_id: UUID) -> str:
    """AAD binding a trigger's Meta verify-token ciphertext to that trigger."""
    return f"trigger:{trigger_id}:verify_token"


async def create_webhook_trigger(
    conn: Conn, keyring: crypto.Keyring, *, autopilot: asyncpg.Record, publisher: Publisher,
    provider: str = "generic", event_filters: list[str] | None = None, rate_limit_per_minute: int = 60,
    signature_scheme: dict[str, object] | None = None, dedupe_key_source: str | None = None,
    event_source: str | None = None, handshake: dict[str, object] | None = None,
    reply: dict[str, object] | None = None, verify_token: str | None = None,
    payload_filter: dict[str, object] | None = None,
) -> tuple[asyncpg.Record, str]:
    """Create a webhook trigger with a fresh ``awt_`` token; returns ``(trigger, token)``.

    ``verify_token`` (a Meta handshake's) is stored encrypted, apart from the ``handshake`` JSON.
    """
    token = crypto.new_token(WEBHOOK_TOKEN_PREFIX)
    token_digest = crypto.digest(token)
    async with conn.transaction():
        row = one(await conn.fetchrow(
            Q.trigger_insert_webhook, autopilot["workspace_id"], autopilot["id"], token_digest,
            keyring.encrypt(token, token_context(token_digest)), crypto.hint(token), provider,
            event_filters or [], rate_limit_per_minute, publisher.type, publisher.id, signature_scheme,
            dedupe_key_source, event_source, handshake, reply, payload_filter,
        ))
        if verify_token is not None:
            row = await set_verify_token(conn, keyring, row["id"], verify_token)
        await publish(conn, autopilot["id"], "trigger_create", publisher, {"trigger_id": str(row["id"])})
    return row, token


async def create_schedule_trigger(
    conn: Conn, *, autopilot: asyncpg.Record, publisher: Publisher, cron: str,
    timezone: str, next_fire_at: datetime, overlap_policy: str = "skip",
) -> asyncpg.Record:
    """Create a schedule trigger (the caller validated the cron and computed its first fire time)."""
    async with conn.transaction():
        row = one(await conn.fetchrow(
            Q.trigger_insert_schedule, autopilot["workspace_id"], autopilot["id"], cron, timezone,
            overlap_policy, next_fire_at, publisher.type, publisher.id,
        ))
        await publish(conn, autopilot["id"], "trigger_create", publisher, {"trigger_id": str(row["id"])})
    return row


async def set_signing_secret(
    conn: Conn, keyring: crypto.Keyring, trigger_id: UUID, secret: str | None,
    grace_seconds: int = 0,
) -> None:
    """Set (or with None remove) a trigger's signing secret; the old one verifies for ``grace_seconds``."""
    sealed = None if secret is None else keyring.encrypt(secret, signing_secret_context(trigger_id))
    await conn.execute(
        Q.trigger_set_signing_secret, trigger_id, sealed, None if secret is None else crypto.hint(secret),
        grace_seconds,
    )


async def set_verify_token(conn: Conn, keyring: crypto.Keyring, trigger_id: UUID, token: str | None) -> asyncpg.Record:
    """Set (or with None remove) a webhook trigger's Meta verify token, encrypted; the updated trigger."""
    sealed = None if token is None else keyring.encrypt(token, verify_token_context(trigger_id))
    return one(await conn.fetchrow(Q.trigger_set_verify_token, trigger_id, sealed,
                                   None if token is None else crypto.hint(token)))
