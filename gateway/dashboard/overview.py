"""The overview: runtimes online, today's runs and deliveries, queues, failures, next fires, and charts."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from gateway import overload
from gateway.dashboard import charts
from gateway.dashboard.web import ctx_of, viewer
from sql import Q


async def overview(request: Request) -> Response:
    """Every panel scoped to the member's workspace; the charts cover the last 24 hours."""
    v = await viewer(request)
    ws, settings = v.workspace_id, ctx_of(request).settings
    async with overload.connection(ctx_of(request)) as conn:
        now: datetime = (await conn.fetchval(Q.server_now, None)).astimezone(UTC)
        values = {
            "runtimes": await conn.fetch(Q.dashboard_runtimes_online, ws, settings.heartbeat_timeout_s),
            "runs": await conn.fetch(Q.dashboard_runs_today, ws),
            "deliveries": await conn.fetch(Q.dashboard_deliveries_today, ws),
            "expired": await conn.fetchval(Q.dashboard_expired_leases_today, ws),
            "queues": await conn.fetch(Q.dashboard_queue_by_agent, ws),
            "failures": await conn.fetch(Q.dashboard_recent_failures, ws),
            "fires": await conn.fetch(Q.dashboard_next_fires, ws),
            "charts": [
                charts.deliveries(await conn.fetch(Q.dashboard_deliveries_per_bucket, ws, charts.BUCKET_S, now), now),
                charts.latency(await conn.fetch(Q.dashboard_push_latency, ws, charts.BUCKET_S, now), now),
            ],
        }
    return v.render("overview.html", now=now, **values)
