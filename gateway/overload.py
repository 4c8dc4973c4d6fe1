"""Overload and outage at the HTTP edge: a bounded wait for a connection, then 503 with Retry-After.

A request never queues behind a saturated pool or a dead database for longer than
``HOOKGATE_POOL_ACQUIRE_TIMEOUT``: it is answered ``503 {"error":"unavailable"}`` with ``Retry-After``
(providers retry on 503), and the pool reconnects by itself once the database is back. Nothing is
stored and nothing is answered 2xx, so a 503 never loses an event.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import ApiError, error_response
from hookgate.context import Context

log = logging.getLogger("hookgate.http")

#: Seconds a client is told to wait; short, since the usual cause (a burst, a failover) passes quickly.
RETRY_AFTER_S = 5

#: Errors that mean "the database cannot serve us right now", not "this request is wrong".
UNAVAILABLE = (
    OSError, TimeoutError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError, asyncpg.AdminShutdownError,
    asyncpg.QueryCanceledError,
)


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


async def database_unavailable(request: Request, exc: Exception) -> Response:
    """Any handler whose database work failed for lack of a database: 503 + Retry-After, no detail."""
    log.warning("database unavailable", extra={"error": exc.__class__.__name__})
    return error_response(503, "unavailable", "service temporarily unavailable, retry later",
                          {"Retry-After": str(RETRY_AFTER_S)})


#: Exception handlers the app installs (more specific than the catch-all 500 handler).
HANDLERS = dict.fromkeys(UNAVAILABLE, database_unavailable)
