"""Assemble the ASGI application from each area's routes; the context is opened by the caller."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from gateway import access, admin, dashboard, errors, health, ingress, metrics_endpoint, overload, runtime
from hookgate.context import Context


def all_routes() -> list[BaseRoute]:
    """Routes of every area of the HTTP edge; the ingress first, since routes are matched in order."""
    return [*ingress.routes, *health.routes, *admin.routes, *runtime.routes, *metrics_endpoint.routes,
            *dashboard.routes]


def create_app(ctx: Context) -> Starlette:
    """The Hookgate HTTP application over an already-open context (pool, keyring, settings)."""
    app = Starlette(routes=all_routes(), exception_handlers={**overload.HANDLERS, **errors.HANDLERS},
                    middleware=[Middleware(access.RequestContext)])
    app.state.ctx = ctx
    return app
