"""``GET /metrics``: the Prometheus text exposition of this process (no authentication, see OPERATIONS.md).

Gateway processes serve it on their HTTP port. Worker and scheduler processes have no HTTP server, so
with ``HOOKGATE_METRICS_PORT`` set they run :func:`metrics_server`, which serves this route and the
``/healthz`` and ``/readyz`` probes (what container health checks and orchestrators ask).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookgate import metrics
from hookgate.context import Context

if TYPE_CHECKING:
    from gateway.server import HttpServer


def queue_stats(request: Request) -> metrics.QueueStats:
    """The app's queue statistics cache (one per app, created on first scrape)."""
    state = request.app.state
    if getattr(state, "queue_stats", None) is None:
        state.queue_stats = metrics.QueueStats(state.ctx.pool)
    stats: metrics.QueueStats = state.queue_stats
    return stats


async def metrics_page(request: Request) -> Response:
    """Counters of this process, its pool usage, and queue depth read (cached) from the database."""
    # The classic 0.0.4 text format: what generate_latest writes and every Prometheus version reads.
    body = await metrics.render(request.app.state.ctx.pool, queue_stats(request))
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)


routes = [Route("/metrics", metrics_page, methods=["GET"])]


def metrics_app(ctx: Context) -> Starlette:
    """An app serving ``/metrics``, ``/healthz`` and ``/readyz`` (for roles without the gateway)."""
    from gateway import health

    app = Starlette(routes=[*routes, *health.routes])
    app.state.ctx = ctx
    return app


def metrics_server(ctx: Context, port: int) -> HttpServer:
    """A service serving ``/metrics`` and the probes on ``port`` (HOOKGATE_METRICS_PORT) for workers and schedulers."""
    from gateway.server import HttpServer  # the server module imports the app, which imports this one

    server = HttpServer(ctx, port=port, app=metrics_app(ctx))
    server.name = "metrics"
    return server
