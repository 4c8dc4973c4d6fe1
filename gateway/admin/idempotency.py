"""``Idempotency-Key`` on API writes (DESIGN §1): the same key within 5 minutes gets the same response.

The key is claimed in the same transaction as the work and the response is stored before commit, so a
retry after a lost answer replays the stored response instead of doing the work twice. A concurrent
request with the same key waits on the claim until the first commits, then replays. The same key with a
different body is a client bug: 422. Keys are scoped by workspace and request path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from gateway.errors import ApiError
from hookgate.database import Conn, one
from sql import Q


async def once(
    conn: Conn, workspace_id: UUID, key: str, route: str, digest: str,
    work: Callable[[], Awaitable[tuple[int, Any]]],
) -> tuple[int, Any]:
    """Run ``work`` once per (workspace, route, key) in the replay window; returns ``(status, body)``."""
    if not 1 <= len(key) <= 255 or not key.isascii() or not key.isprintable():
        raise ApiError(422, "invalid_request", "Idempotency-Key must be 1 to 255 printable ASCII characters")
    async with conn.transaction():
        if await conn.fetchval(Q.idempotency_claim, workspace_id, key, route, digest, None) is not None:
            status, body = await work()
            await conn.execute(Q.idempotency_store, workspace_id, key, route, status, body)
            return status, body
        stored = one(await conn.fetchrow(Q.idempotency_get, workspace_id, key, route))
    if stored["request_digest"] != digest:
        raise ApiError(422, "idempotency_key_reused", "this Idempotency-Key was used with a different request")
    return stored["response_status"], stored["response_body"]
