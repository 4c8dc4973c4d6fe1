"""``Idempotency-Key`` on API writes (ARCHITECTURE §1): the same key within 5 minutes gets the same response.

The key is claimed in the same transaction as the work and the response is stored before commit, so a
retry after a lost answer replays the stored response instead of doing the work twice. A concurrent
request with the same key waits on the claim until the first commits, then replays. The same key with a
different body is a client bug: 422. A key belongs to one API key, method and route of one workspace, so
nobody else's request (not another member's, not another key of the same member) ever replays it; and the
handler claims it only after its permission checks, so a caller who may no longer write is refused, not
replayed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from autopilot.workspaces import Principal
from gateway.errors import ApiError
from hookgate.database import Conn, one
from sql import Q

Work = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Scope:
    """Whose key it is (workspace, API key, method, route), the key, and the request body's digest."""

    workspace_id: UUID
    api_key_id: UUID
    method: str
    route: str
    key: str
    digest: str

    def ids(self) -> tuple[UUID, UUID, str, str, str]:
        """The ``$1..$5`` of the idempotency queries."""
        return self.workspace_id, self.api_key_id, self.method, self.route, self.key


def scope(principal: Principal, method: str, route: str, key: str, digest: str) -> Scope:
    """The scope of ``key`` sent by ``principal``; 422 unless it is 1 to 255 printable ASCII characters."""
    if not 1 <= len(key) <= 255 or not key.isascii() or not key.isprintable():
        raise ApiError(422, "invalid_request", "Idempotency-Key must be 1 to 255 printable ASCII characters")
    return Scope(principal.workspace_id, principal.key_id, method, route, key, digest)


async def once(conn: Conn, scope: Scope, work: Work) -> dict[str, Any]:
    """Run ``work`` once per scope in the replay window; returns its response body, or the stored one.

    Only a success is stored (a failure rolls the claim back), so the status is the endpoint's own.
    """
    async with conn.transaction():
        if await conn.fetchval(Q.idempotency_claim, *scope.ids(), scope.digest, None) is not None:
            body = await work()
            await conn.execute(Q.idempotency_store, *scope.ids(), body)
            return body
        stored = one(await conn.fetchrow(Q.idempotency_get, *scope.ids()))
    if stored["request_digest"] != scope.digest:
        raise ApiError(422, "idempotency_key_reused", "this Idempotency-Key was used with a different request")
    return dict(stored["response_body"])
