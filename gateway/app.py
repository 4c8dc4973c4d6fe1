"""Assemble the ASGI application from each area's routes; the context is opened by the caller."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from gateway import admin, errors, health, ingress
from hookgate.context import Context


def all_routes() -> list[BaseRoute]:
    """Routes of every area of the HTTP edge."""
    return [*health.routes, *admin.routes, *ingress.routes]


def create_app(ctx: Context) -> Starlette:
    """The Hookgate HTTP application over an already-open context (pool, keyring, settings)."""
    app = Starlette(routes=all_routes(), exception_handlers=errors.HANDLERS)
    app.state.ctx = ctx
    return app
