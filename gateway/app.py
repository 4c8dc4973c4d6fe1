"""Assemble the ASGI application from each area's routes; the context is opened by the caller.

The app holds one piece of state of its own, the runtime claims' waits (a LISTEN connection once a claim
long-polls), which :func:`shutdown` ends: the HTTP server calls it before draining, so no long-poll holds
the shutdown.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from gateway import access, admin, dashboard, errors, health, metrics_endpoint, no_store, overload, runtime
from gateway.claim_wait import ClaimWaits
from gateway.ingress import endpoint as ingress
from hookgate.context import Context


def all_routes() -> list[BaseRoute]:
    """Routes of every area of the HTTP edge; the ingress first, since routes are matched in order."""
    return [*ingress.routes, *health.routes, *admin.routes, *runtime.routes, *metrics_endpoint.routes,
            *dashboard.routes]


def create_app(ctx: Context) -> Starlette:
    """The Hookgate HTTP application over an already-open context (pool, keyring, settings)."""
    app = Starlette(routes=all_routes(), exception_handlers={**overload.HANDLERS, **errors.HANDLERS},
                    middleware=[Middleware(access.RequestContext), Middleware(no_store.NoStore)])
    app.state.ctx = ctx
    app.state.claim_waits = ClaimWaits(ctx.pool, ctx.direct_dsn, poll_s=ctx.settings.runtime_claim_poll_s,
                                       acquire_timeout=ctx.settings.pool_acquire_timeout)
    return app


async def shutdown(app: Starlette) -> None:
    """End every waiting runtime claim (204) and close the app's listening connection, if it opened one."""
    waits: ClaimWaits | None = getattr(app.state, "claim_waits", None)
    if waits is not None:
        await waits.close()
