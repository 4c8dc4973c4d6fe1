"""Changes to live autopilots and triggers, each with its rule version and publisher re-stamp.

ARCHITECTURE §3: every substantive change appends an immutable rule version in the same transaction.
ARCHITECTURE §9: editing re-stamps the publisher, so the member who last edited a rule is accountable for the
runs it starts: a trigger edit re-stamps that trigger, an autopilot edit re-stamps all its triggers.
Token rotation and signing secrets are not rule changes: they are audited (TOKEN_ROTATE, SECRET_SET).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import audit
from autopilot.rules import Publisher, publish, set_signing_secret, set_verify_token, token_context
from hookgate import crypto, notify
from hookgate.database import Conn, one
from hookgate.errors import Refused
from sql import Q

#: Autopilot fields a PATCH may change; each is substantive (part of the rule snapshot).
AUTOPILOT_FIELDS = ("title", "instructions", "assignee_type", "assignee_id", "execution_mode",
                    "issue_title_template", "run_timeout_s")
#: The status each lifecycle verb moves an autopilot to.
STATUS_VERBS = {"pause": "paused", "resume": "active", "archive": "archived"}


class EditError(Refused):
    """A change that the current state refuses (``code`` says why: ``archived``, …)."""


async def edit_autopilot(
    conn: Conn, autopilot_id: UUID, changes: dict[str, Any], publisher: Publisher
) -> tuple[asyncpg.Record, asyncpg.Record | None]:
    """Apply ``changes``; if anything changed, publish a version and re-stamp every live trigger."""
    async with conn.transaction():
        current = one(await conn.fetchrow(Q.autopilot_lock, autopilot_id))
        if current["status"] == "archived":
            raise EditError("archived", "an archived autopilot cannot be edited")
        merged = {k: changes.get(k, current[k]) for k in AUTOPILOT_FIELDS}
        if all(merged[k] == current[k] for k in AUTOPILOT_FIELDS):
            return current, None
        row = one(await conn.fetchrow(Q.autopilot_update, autopilot_id, *(merged[k] for k in AUTOPILOT_FIELDS)))
        await conn.fetch(Q.trigger_restamp_autopilot, autopilot_id, publisher.type, publisher.id)
        version = await publish(conn, autopilot_id, "edit", publisher, {"fields": sorted(
            k for k in AUTOPILOT_FIELDS if merged[k] != current[k])})
    return row, version


async def set_status(
    conn: Conn, autopilot_id: UUID, verb: str, publisher: Publisher
) -> tuple[asyncpg.Record, asyncpg.Record | None]:
    """Pause, resume or archive; a real change publishes a version (archived is final)."""
    async with conn.transaction():
        current = one(await conn.fetchrow(Q.autopilot_lock, autopilot_id))
        if current["status"] == "archived" and verb != "archive":
            raise EditError("archived", "an archived autopilot cannot be paused or resumed")
        row = await conn.fetchrow(Q.autopilot_set_status, autopilot_id, STATUS_VERBS[verb])
        if row is None:
            return current, None
        version = await publish(conn, autopilot_id, verb, publisher)
        for trigger in await conn.fetch(Q.trigger_schedule_ids, autopilot_id):
            await conn.execute(Q.notify_send, notify.TRIGGERS, str(trigger["id"]))
    return row, version


async def add_collaborator(conn: Conn, autopilot: asyncpg.Record, member_id: UUID, actor_id: UUID) -> bool:
    """Give a member write access; False if they already had it. Audited, not a rule change."""
    async with conn.transaction():
        added = await conn.fetchrow(Q.collaborator_insert, autopilot["id"], member_id, actor_id)
        if added is not None:
            await audit.record(conn, "COLLABORATOR_ADD", actor_type="member", actor_id=actor_id,
                               subject_type="autopilot", subject_id=autopilot["id"],
                               workspace_id=autopilot["workspace_id"], detail={"member_id": str(member_id)})
    return added is not None


async def remove_collaborator(conn: Conn, autopilot: asyncpg.Record, member_id: UUID, actor_id: UUID) -> bool:
    """Take write access away; False if the member was not a collaborator."""
    async with conn.transaction():
        removed = await conn.fetchrow(Q.collaborator_delete, autopilot["id"], member_id)
        if removed is not None:
            await audit.record(conn, "COLLABORATOR_REMOVE", actor_type="member", actor_id=actor_id,
                               subject_type="autopilot", subject_id=autopilot["id"],
                               workspace_id=autopilot["workspace_id"], detail={"member_id": str(member_id)})
    return removed is not None


async def edit_webhook_trigger(
    conn: Conn, trigger_id: UUID, changes: dict[str, Any], publisher: Publisher, *,
    verify_token: VerifyTokenChange | None = None,
) -> tuple[asyncpg.Record, asyncpg.Record | None]:
    """Edit a webhook trigger's fields (scheme, sources, handshake, reply, filters, …), and maybe the verify token.

    A real change re-stamps and publishes (a new verify token always is one).
    """
    keys = ("enabled", "provider", "event_filters", "rate_limit_per_minute", "signature_scheme", "dedupe_key_source",
            "event_source", "handshake", "reply", "payload_filter")
    async with conn.transaction():
        current, merged = await _lock_and_merge(conn, trigger_id, changes, keys)
        if merged is None and verify_token is None:
            return current, None
        row = current
        if merged is not None:
            row = one(await conn.fetchrow(Q.trigger_update_webhook, trigger_id, *(merged[k] for k in keys),
                                          publisher.type, publisher.id))
        if verify_token is not None:
            row = await set_verify_token(conn, verify_token.keyring, trigger_id, verify_token.token)
        version = await _publish_trigger(conn, row, "trigger_edit", publisher, current, (*keys, "verify_token_ct"))
    return row, version


@dataclass(frozen=True)
class VerifyTokenChange:
    """A Meta verify token to store encrypted with ``keyring`` (None: remove it)."""

    keyring: crypto.Keyring
    token: str | None


async def edit_schedule_trigger(
    conn: Conn, trigger_id: UUID, changes: dict[str, Any], next_fire_at: datetime | None, publisher: Publisher
) -> tuple[asyncpg.Record, asyncpg.Record | None]:
    """Edit enabled/cron/timezone/overlap policy (``next_fire_at`` computed by the caller); wakes schedulers."""
    keys = ("enabled", "cron", "timezone", "overlap_policy")
    async with conn.transaction():
        current, merged = await _lock_and_merge(conn, trigger_id, changes, keys)
        if merged is None:
            return current, None
        fire_at = next_fire_at if next_fire_at is not None else current["next_fire_at"]
        row = one(await conn.fetchrow(Q.trigger_update_schedule, trigger_id, *(merged[k] for k in keys), fire_at,
                                      publisher.type, publisher.id))
        version = await _publish_trigger(conn, row, "trigger_edit", publisher, current, keys)
        await conn.execute(Q.notify_send, notify.TRIGGERS, str(trigger_id))
    return row, version


async def _lock_and_merge(
    conn: Conn, trigger_id: UUID, changes: dict[str, Any], keys: tuple[str, ...]
) -> tuple[asyncpg.Record, dict[str, Any] | None]:
    """The trigger, locked, and its ``keys`` with ``changes`` applied; None for them when nothing would change."""
    current = one(await conn.fetchrow(Q.trigger_lock, trigger_id))
    merged = {k: changes.get(k, current[k]) for k in keys}
    return current, None if all(merged[k] == current[k] for k in keys) else merged


async def _publish_trigger(
    conn: Conn, row: asyncpg.Record, change: str, publisher: Publisher, before: asyncpg.Record,
    keys: tuple[str, ...],
) -> asyncpg.Record:
    changed = sorted(k for k in keys if row[k] != before[k])
    return await publish(conn, row["autopilot_id"], change, publisher,
                         {"trigger_id": str(row["id"]), "fields": changed})


async def delete_trigger(conn: Conn, trigger_id: UUID, publisher: Publisher) -> asyncpg.Record:
    """Soft-delete a trigger (its token stops working at once) and publish the change."""
    async with conn.transaction():
        row = one(await conn.fetchrow(Q.trigger_delete, trigger_id))
        await publish(conn, row["autopilot_id"], "trigger_delete", publisher, {"trigger_id": str(trigger_id)})
        if row["kind"] == "schedule":
            await conn.execute(Q.notify_send, notify.TRIGGERS, str(trigger_id))
    return row


async def rotate_token(
    conn: Conn, keyring: crypto.Keyring, trigger_id: UUID, actor_id: UUID
) -> tuple[asyncpg.Record, str]:
    """Replace a webhook trigger's token; the old one answers 404 as soon as this commits (TOKEN_ROTATE)."""
    from autopilot.rules import WEBHOOK_TOKEN_PREFIX

    token = crypto.new_token(WEBHOOK_TOKEN_PREFIX)
    token_digest = crypto.digest(token)
    async with conn.transaction():
        row = one(await conn.fetchrow(
            Q.trigger_rotate_token, trigger_id, token_digest, keyring.encrypt(token, token_context(token_digest)),
            crypto.hint(token),
        ))
        await audit.record(conn, "TOKEN_ROTATE", actor_type="member", actor_id=actor_id, subject_type="trigger",
                           subject_id=trigger_id, workspace_id=row["workspace_id"],
                           detail={"hint": row["token_hint"]})
    return row, token


async def change_signing_secret(
    conn: Conn, keyring: crypto.Keyring, trigger: asyncpg.Record, secret: str | None, grace_seconds: int,
    actor_id: UUID,
) -> None:
    """Set or remove a trigger's signing secret (the previous one verifies during the grace window)."""
    async with conn.transaction():
        await set_signing_secret(conn, keyring, trigger["id"], secret, grace_seconds)
        await audit.record(
            conn, "SECRET_SET", actor_type="member", actor_id=actor_id, subject_type="trigger",
            subject_id=trigger["id"], workspace_id=trigger["workspace_id"],
            detail={"removed": secret is None, "grace_seconds": grace_seconds,
                    "hint": None if secret is None else crypto.hint(secret)},
        )

