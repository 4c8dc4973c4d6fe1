"""The append-only audit log: who did what to which subject (CLAIM, EXPIRE, TOKEN_ROTATE, PUBLISH, …)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from hookgate.database import Conn
from sql import Q


async def record(
    conn: Conn,
    action: str,
    *,
    actor_type: str,
    actor_id: UUID | str | None,
    subject_type: str,
    subject_id: UUID | str | None,
    workspace_id: UUID | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one entry in the caller's transaction (so it commits or rolls back with the change)."""
    await conn.execute(
        Q.audit_insert, workspace_id, action, actor_type,
        None if actor_id is None else str(actor_id), subject_type,
        None if subject_id is None else str(subject_id), detail or {},
    )
