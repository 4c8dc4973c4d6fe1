"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: database and migrations)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hookgate import database, migrations
from hookgate.context import Context
from sql import Q


async def healthz(request: Request) -> JSONResponse:
    """Always 200 while the process serves HTTP."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """200 when the database answers and no migration or function file is pending; 503 with the reason otherwise."""
    ctx: Context = request.app.state.ctx
    try:
        async with asyncio.timeout(2.0), ctx.pool.acquire() as conn:
            await conn.fetchval(Q.server_ping)
            missing = [m.name for m in await migrations.pending(conn)]
            missing += [f.file_name for f in await migrations.stale_functions(conn)]
    except database.DATABASE_ERRORS:
        return JSONResponse({"status": "unavailable", "error": "database_unreachable",
                             "message": "database is unreachable"}, status_code=503)
    except migrations.MigrationError as exc:
        return JSONResponse({"status": "unavailable", "error": "migrations_mismatch", "message": str(exc)},
                            status_code=503)
    if missing:
        return JSONResponse({"status": "unavailable", "error": "migrations_pending",
                             "message": f"{len(missing)} migration(s) or function file(s) pending",
                             "pending": missing}, status_code=503)
    return JSONResponse({"status": "ready"})


routes = [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"])]
