"""Overload, outage and contention at the HTTP edge: bounded waits and retries, then 503 with Retry-After.

A request never queues behind a saturated pool or a dead database for longer than
``HOOKGATE_POOL_ACQUIRE_TIMEOUT``: it is answered ``503 {"error":"unavailable"}`` with ``Retry-After``
(providers retry on 503), and the pool reconnects by itself once the database is back. Nothing is
stored and nothing is answered 2xx, so a 503 never loses an event.

A request whose transaction PostgreSQL aborted for a deadlock or a serialization failure is run again
(:func:`retried`, at most ``CONFLICT_ATTEMPTS`` times with a jittered pause) and, if it keeps losing,
answered ``503 {"error":"busy"}`` with ``Retry-After``: never a 500.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import ApiError, error_response
from hookgate import database
from hookgate.context import Context

log = logging.getLogger("hookgate.http")

#: Seconds a client is told to wait; short, since the usual cause (a burst, a failover) passes quickly.
RETRY_AFTER_S = 5

#: Runs of a request whose transaction keeps losing to concurrent ones (deadlock, serialization failure).
CONFLICT_ATTEMPTS = 3
#: The first retry waits a random time up to this, the next up to twice this, ...
CONFLICT_PAUSE_S = 0.05
#: Seconds a client is told to wait after the last lost conflict: contention passes quickly.
BUSY_RETRY_AFTER_S = 1

Handler = Callable[[Request], Awaitable[Response]]

#: Errors that mean "the database cannot serve us right now", not "this request is wrong".
UNAVAILABLE = database.UNAVAILABLE_ERRORS


class Unavailable(ApiError):
    """503 with Retry-After: the database is saturated or unreachable; the client should retry."""

    def __init__(self, message: str = "service temporarily unavailable, retry later") -> None:
        super().__init__(503, "unavailable", message, headers={"Retry-After": str(RETRY_AFTER_S)})


@contextlib.asynccontextmanager
async def connection(ctx: Context) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    """A pooled connection, waiting at most ``pool_acquire_timeout``; raises :class:`Unavailable`."""
    try:
        conn = await ctx.pool.acquire(timeout=ctx.settings.pool_acquire_timeout)
    except UNAVAILABLE as exc:
        log.warning("no database connection", extra={"error": exc.__class__.__name__})
        raise Unavailable() from exc
    try:
        yield conn
    finally:
        await ctx.pool.release(conn)


def retried(handler: Handler) -> Handler:
    """``handler`` run again when its transaction lost a deadlock or serialization conflict (the edge's one place).

    Safe because the failed transaction was rolled back before the retry: an admin endpoint runs in one
    transaction (``gateway.admin.openapi``); a runtime or dashboard handler writes in at most one transaction,
    its other statements are reads or idempotent (heartbeat, the same report again). A retry reads the same
    body (Starlette's ``Request`` caches it; the dashboard keeps the form it read). Once the attempts are spent
    the conflict reaches :func:`database_busy`.
    """
    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        return await database.retrying(lambda: handler(request), attempts=CONFLICT_ATTEMPTS, pause_s=CONFLICT_PAUSE_S)

    return run


async def database_busy(request: Request, exc: Exception) -> Response:
    """A transaction that kept losing to concurrent ones (40P01, 40001): 503 busy + Retry-After, no detail."""
    assert isinstance(exc, asyncpg.PostgresError)
    log.warning("database busy; answered 503", extra={"sqlstate": exc.sqlstate})
    return error_response(503, "busy", "the request conflicted with concurrent ones; retry shortly",
                          {"Retry-After": str(BUSY_RETRY_AFTER_S)})


async def database_unavailable(request: Request, exc: Exception) -> Response:
    """Any handler whose database work failed for lack of a database: 503 + Retry-After, no detail."""
    log.warning("database unavailable", extra={"error": exc.__class__.__name__})
    return error_response(503, "unavailable", "service temporarily unavailable, retry later",
                          {"Retry-After": str(RETRY_AFTER_S)})


#: Exception handlers the app installs (more specific than the catch-all 500 handler).
HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    **dict.fromkeys(UNAVAILABLE, database_unavailable),
    asyncpg.DeadlockDetectedError: database_busy, asyncpg.SerializationError: database_busy,
}
