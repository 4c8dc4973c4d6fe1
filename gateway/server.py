"""The HTTP server as a service: uvicorn over the app, stopped by our signal handling, not its own.

uvicorn is told not to rewrite the client address from ``X-Forwarded-For`` (``proxy_headers=False``; its
default believes a loopback peer): only ``HOOKGATE_TRUSTED_PROXIES`` decides that (:mod:`gateway.ratelimit`).
The request, head and connection limits are :mod:`gateway.http_limits`. The listening sockets are opened by
:meth:`HttpServer.bind` before anything is announced, so a taken port is one ``CannotListen`` error
(:mod:`gateway.sockets`), or handed over already open to a gateway process started by ``--workers``
(:mod:`gateway.processes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator

import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from gateway.app import create_app, shutdown
from gateway.http_limits import ConnectionGate, guarded
from gateway.ratelimit import parse_networks
from gateway.sockets import listen
from hookgate.context import Context


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers (the role runner owns SIGTERM/SIGINT), saying when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start as uvicorn does, then set :attr:`listening` (the app accepts connections from now on)."""
        await super().startup(sockets=sockets)
        if self.started:
            self.listening.set()


class HttpServer:
    """Serve the Hookgate app on HOOKGATE_HOST:HOOKGATE_PORT until stopped; in-flight requests finish."""

    name = "http"

    def __init__(self, ctx: Context, *, host: str | None = None, port: int | None = None,
                 app: ASGIApp | None = None, parser: type[asyncio.Protocol] = AutoHTTPProtocol,
                 sockets: list[socket.socket] | None = None) -> None:
        settings = ctx.settings
        self.app = app or create_app(ctx)
        self.connections = ConnectionGate(settings.max_connections, settings.max_connections_per_ip,
                                          parse_networks(settings.trusted_proxies))
        config = uvicorn.Config(
            self.app, host=host or settings.host, port=settings.port if port is None else port,
            lifespan="off", access_log=False, log_config=None, server_header=False, proxy_headers=False,
            ws="none", timeout_keep_alive=5, timeout_graceful_shutdown=max(1, int(settings.shutdown_deadline) - 1),
            http=guarded(parser, settings.http_read_timeout_s, self.connections),
        )
        self.server = _Server(config)
        self.sockets: list[socket.socket] | None = sockets  # already listening (inherited), or bound by bind()

    def bind(self) -> None:
        """Open the listening sockets now (a no-op the second time); :class:`CannotListen` if that fails."""
        if self.sockets is None:
            config = self.server.config
            self.sockets = listen(config.host, config.port, config.backlog)

    async def run(self) -> None:
        """Serve until :meth:`stop` (binding first unless :meth:`bind` was called)."""
        self.bind()
        await self.server.serve(sockets=self.sockets)

    async def stop(self) -> None:
        """Stop accepting connections; uvicorn lets in-flight requests finish within its grace period.

        Long-polling runtime claims are ended first (they answer 204), or each would hold the drain.
        """
        self.server.should_exit = True
        if isinstance(self.app, Starlette):
            await shutdown(self.app)
        while self.server.started and not self.server.force_exit and self.server.servers:
            await asyncio.sleep(0.05)
            if all(not s.is_serving() for s in self.server.servers):
                break

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        if self.sockets:
            return int(self.sockets[0].getsockname()[1])
        return int(self.server.servers[0].sockets[0].getsockname()[1])
