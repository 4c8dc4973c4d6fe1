"""Agents: health as far as the data has it, the retry schedule, editing (the admin API's PATCH), secret rotation.

Health is what the database knows: the circuit breaker's state (``healthy``, or ``unhealthy`` since when,
with its next probe and last error, rendered by the admin API's ``health_out``), runtime instances online
(a heartbeat within the timeout), queue depth, tasks in flight and the latest task errors. The retry
schedule is the agent's own, or the gateway's default (HOOKGATE_PUSH_RETRY_SCHEDULE).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway import overload
from gateway.admin.agents import health_out
from gateway.dashboard.web import (
    Denied,
    Viewer,
    admin_read,
    admin_write,
    confirm,
    confirmed,
    ctx_of,
    uuid_param,
    viewer,
)
from hookgate import egress, retry
from sql import Q

EDITABLE = ("name", "url", "timeout_s", "max_concurrency")


async def list_agents(request: Request) -> Response:
    """Every agent of the workspace with its health."""
    v = await viewer(request)
    async with overload.connection(ctx_of(request)) as conn:
        rows = await conn.fetch(Q.dashboard_agent_health, v.workspace_id,
                                ctx_of(request).settings.heartbeat_timeout_s, None)
    default = ctx_of(request).settings.retry_schedule
    return v.render("agents.html", rows=[_shown(r, default) for r in rows])


def _shown(row: Any, default: retry.Schedule) -> dict[str, Any]:
    """A health row with the URL as the API shows it (credentials masked), its breaker's health and schedule."""
    return dict(row) | {"endpoint_url": egress.redact(row["endpoint_url"]) if row["endpoint_url"] else None,
                        "health": health_out(row).model_dump(mode="json"),
                        "schedule": schedule_text(row["retry_schedule"], default)}


def schedule_text(delays: list[float] | None, default: retry.Schedule) -> str:
    """``5s,1m,1h (4 attempts)``; an agent without its own schedule: ``default: …`` (the gateway's)."""
    if delays is None:
        return f"default: {default.text()} ({default.attempts} attempts)"
    own = retry.Schedule(tuple(delays))
    return f"{own.text()} ({own.attempts} attempts)"


def may_change(v: Viewer, agent: dict[str, Any]) -> bool:
    """Whether to offer the edit and rotate forms: the admin API decides (and refuses others with 403)."""
    return v.principal.is_admin or agent["owner_id"] == str(v.principal.member_id)


async def agent(request: Request) -> Response:
    """One agent as the admin API shows it, its runtime instances, queue, in flight and latest errors."""
    v = await viewer(request)
    agent_id = uuid_param(request.path_params["agent_id"], "agent")
    async with overload.connection(ctx_of(request)) as conn:
        row = await admin_read(v, conn, "GET", "/v1/agents/{agent_id}", {"agent_id": agent_id})
        health = await conn.fetchrow(Q.dashboard_agent_health, v.workspace_id,
                                     ctx_of(request).settings.heartbeat_timeout_s, agent_id)
        instances = await conn.fetch(Q.dashboard_agent_instances, v.workspace_id, agent_id)
        errors = await conn.fetch(Q.dashboard_agent_errors, v.workspace_id, agent_id)
    schedule = schedule_text(row["retry_schedule"], ctx_of(request).settings.retry_schedule)
    return v.render("agent.html", a=row, health=health, instances=instances, errors=errors, schedule=schedule,
                    may_change=may_change(v, row), saved=request.query_params.get("saved") == "1")


def _changes(form: dict[str, str], current: dict[str, Any]) -> dict[str, Any]:
    """The fields the form changed (PATCH semantics: what is left as shown, or empty, is not sent)."""
    shown = {"name": current["name"], "url": current["runtime"]["url"], "timeout_s": current["runtime"]["timeout_s"],
             "max_concurrency": current["max_concurrency"]}
    sent = {name: form.get(name, "").strip() for name in EDITABLE}
    return {name: value for name, value in sent.items() if value and value != str(shown[name])}


async def edit(request: Request) -> Response:
    """Edit name, URL, timeout and concurrency through ``PATCH /v1/agents/{id}``, after a confirmation."""
    v = await viewer(request, post=True)
    agent_id = uuid_param(request.path_params["agent_id"], "agent")
    async with overload.connection(ctx_of(request)) as conn:
        current = await admin_read(v, conn, "GET", "/v1/agents/{agent_id}", {"agent_id": agent_id})
    changes = _changes(v.form, current)
    if not changes:
        raise Denied(400, "nothing to change: every field is as it was")
    if not confirmed(v):
        return confirm(v, f"Change agent {current['name']}?", [(k, str(val)) for k, val in changes.items()],
                       f"/dashboard/agents/{agent_id}")
    await admin_write(v, "PATCH", "/v1/agents/{agent_id}", {"agent_id": agent_id}, changes)
    return RedirectResponse(f"/dashboard/agents/{agent_id}?saved=1", status_code=303)


async def rotate_secret(request: Request) -> Response:
    """A new signing secret for an http agent, shown on this answer only (the admin API's rotation)."""
    v = await viewer(request, post=True)
    agent_id = uuid_param(request.path_params["agent_id"], "agent")
    if not confirmed(v):
        async with overload.connection(ctx_of(request)) as conn:
            current = await admin_read(v, conn, "GET", "/v1/agents/{agent_id}", {"agent_id": agent_id})
        return confirm(v, f"Rotate the signing secret of agent {current['name']}? The old secret keeps signing "
                          "pushes (as a second signature) for 24 hours.", back=f"/dashboard/agents/{agent_id}")
    rotated = await admin_write(v, "POST", "/v1/agents/{agent_id}/rotate-secret", {"agent_id": agent_id})
    return v.render("secret.html", title="New signing secret", what="signing secret", value=rotated["signing_secret"],
                    note="Shown only now. Until {} pushes are signed with the old secret too.".format(
                        rotated["previous_expires_at"]), back=f"/dashboard/agents/{agent_id}")
