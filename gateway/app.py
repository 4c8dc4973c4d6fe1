"""Assemble the ASGI application from each area's routes; the context is opened by the caller.

The app holds one piece of state of its own, the runtime claims' waits (a LISTEN connection once a claim
long-polls), which :func:`shutdown` ends: the HTTP server calls it before draining, so no long-poll holds
the shutdown. A webhook (``/hooks/…``) is taken to the ingress ahead of Starlette's router (:class:`App`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from gateway import access, admin, dashboard, errors, health, metrics_endpoint, no_store, overload, runtime
from gateway.claim_wait import ClaimWaits
from gateway.ingress import endpoint as ingress
from hookgate.context import Context

_Handler = Callable[[Request, Exception], Awaitable[Response]]


class App(Starlette):
    """Starlette, with a webhook taken straight to the ingress through the same layers that act on it.

    The ingress route is the router's first, so a request it matches is always its: for one, what the app's
    stack does is the 500 of an unhandled error (as Starlette's ``ServerErrorMiddleware``), the request context
    (:class:`gateway.access.RequestContext`) and the app's exception handlers (as its ``ExceptionMiddleware``);
    :mod:`gateway.no_store` passes it by. Skipping the rest (the router's walk, the wrappers' closures) took
    about 10 us of the gateway's CPU per webhook (docs/BENCHMARKS.md). Anything else goes through the stack.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        route = ingress.routes[0]
        assert isinstance(route, Route) and route.methods is not None
        self._hook_route, self._hook_methods = route, frozenset(route.methods)
        self._hook_in_context = access.RequestContext(self._hook_handled)
        self._error_handler: _Handler = errors.unhandled
        self._handlers: dict[type[BaseException], _Handler] = {}
        for key, handler in self.exception_handlers.items():  # split as Starlette's build_middleware_stack does
            if key in (500, Exception):
                self._error_handler = handler
            elif isinstance(key, type):
                self._handlers[key] = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A webhook straight to the ingress; any other request (or a mounted root path) through the stack."""
        route = self._hook_route
        if (scope["type"] == "http" and scope["method"] in self._hook_methods and not scope.get("root_path")
                and (match := route.path_regex.match(scope["path"])) is not None):
            scope["app"], scope["router"], scope["route"] = self, self.router, route
            scope["endpoint"], scope["path_params"] = route.endpoint, match.groupdict()
            await self._hook(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def _hook(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self._hook_in_context(scope, receive, sending)
        except Exception as exc:  # a bug: the bare 500 unless the answer already started, and up to the server
            if not started:
                await (await self._error_handler(Request(scope, receive), exc))(scope, receive, send)
            raise

    async def _hook_handled(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            reply = await ingress.answer(scope, receive)
        except Exception as exc:
            handler = next((self._handlers[cls] for cls in type(exc).__mro__ if cls in self._handlers), None)
            if handler is None:
                raise
            await (await handler(Request(scope, receive), exc))(scope, receive, send)
            return
        await reply(send)


def all_routes() -> list[BaseRoute]:
    """Routes of every area of the HTTP edge; the ingress first, since routes are matched in order."""
    return [*ingress.routes, *health.routes, *admin.routes, *runtime.routes, *metrics_endpoint.routes,
            *dashboard.routes]


def create_app(ctx: Context) -> Starlette:
    """The Hookgate HTTP application over an already-open context (pool, keyring, settings)."""
    app = App(routes=all_routes(), exception_handlers={**overload.HANDLERS, **errors.HANDLERS},
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
