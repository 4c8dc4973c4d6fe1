"""Autopilots and their triggers: pause/resume, webhook URLs for writers, token rotation, enabling.

Also event filters, and the next fires of schedules (computed by the scheduler's own cron code).
"""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway import overload
from gateway.admin import auth
from gateway.admin.pagination import PageQuery
from gateway.admin.triggers import PreviewQuery
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
from hookgate.database import Conn
from hookgate.preset_data import PRESET_HANDSHAKES
from sql import Q


async def list_autopilots(request: Request) -> Response:
    """Every autopilot of the workspace with its trigger counts."""
    v = await viewer(request)
    async with overload.connection(ctx_of(request)) as conn:
        rows = await conn.fetch(Q.dashboard_autopilots, v.workspace_id)
    return v.render("autopilots.html", rows=rows)


async def autopilot(request: Request) -> Response:
    """One autopilot and its triggers as the admin API shows them to this member (URLs for writers only)."""
    v = await viewer(request)
    autopilot_id = uuid_param(request.path_params["autopilot_id"], "autopilot")
    ids = {"autopilot_id": autopilot_id}
    async with overload.connection(ctx_of(request)) as conn:
        row = await admin_read(v, conn, "GET", "/v1/autopilots/{autopilot_id}", ids)
        triggers = (await admin_read(v, conn, "GET", "/v1/autopilots/{autopilot_id}/triggers", ids,
                                     PageQuery(limit=500)))["items"]
        writer = await auth.can_write(conn, v.principal, await auth.autopilot_of(conn, v.principal, autopilot_id))
        fires = {t["id"]: await _next_fires(v, conn, t) for t in triggers if t["kind"] == "schedule"}
        assignee = await conn.fetchrow(Q.dashboard_assignee, v.workspace_id, row["assignee"]["type"],
                                       UUID(row["assignee"]["id"]))
    return v.render("autopilot.html", p=row, triggers=triggers, writer=writer, fires=fires, assignee=assignee,
                    done=request.query_params.get("done"), preset_handshakes=PRESET_HANDSHAKES)


async def _next_fires(v: Viewer, conn: Conn, trigger: dict[str, Any]) -> list[dict[str, str]]:
    if not trigger["enabled"]:
        return []
    preview = await admin_read(v, conn, "GET", "/v1/triggers/{trigger_id}/preview",
                               {"trigger_id": UUID(trigger["id"])}, PreviewQuery(count=3))
    occurrences: list[dict[str, str]] = preview["occurrences"]
    return occurrences


async def set_status(request: Request) -> Response:
    """Pause or resume an autopilot (``POST /v1/autopilots/{id}/pause|resume``), after a confirmation."""
    v = await viewer(request, post=True)
    autopilot_id = uuid_param(request.path_params["autopilot_id"], "autopilot")
    verb = request.path_params["verb"]
    if verb not in ("pause", "resume"):
        raise Denied(404, "no such action")
    back = f"/dashboard/autopilots/{autopilot_id}"
    if not confirmed(v):
        async with overload.connection(ctx_of(request)) as conn:
            row = await admin_read(v, conn, "GET", "/v1/autopilots/{autopilot_id}", {"autopilot_id": autopilot_id})
        return confirm(v, f"{verb.capitalize()} autopilot {row['title']}?", back=back)
    await admin_write(v, "POST", f"/v1/autopilots/{{autopilot_id}}/{verb}", {"autopilot_id": autopilot_id})
    return RedirectResponse(f"{back}?done={verb}d", status_code=303)


async def _trigger(v: Viewer, trigger_id: UUID) -> dict[str, Any]:
    async with overload.connection(ctx_of(v.request)) as conn:
        return await admin_read(v, conn, "GET", "/v1/triggers/{trigger_id}", {"trigger_id": trigger_id})


async def rotate_token(request: Request) -> Response:
    """A new webhook token (the old URL answers 404 at once); the new URL is shown to copy."""
    v = await viewer(request, post=True)
    trigger_id = uuid_param(request.path_params["trigger_id"], "trigger")
    trigger = await _trigger(v, trigger_id)
    back = f"/dashboard/autopilots/{trigger['autopilot_id']}"
    if not confirmed(v):
        return confirm(v, "Rotate this webhook's token? The old URL stops working at once; the provider must be "
                          "given the new URL.", [("Trigger", str(trigger_id))], back)
    rotated = await admin_write(v, "POST", "/v1/triggers/{trigger_id}/rotate-token", {"trigger_id": trigger_id})
    return v.render("secret.html", title="New webhook URL", what="webhook URL", value=rotated["url"],
                    note="Give this URL to the provider; the old one answers 404 from now on.", back=back)


def parse_filters(text: str) -> list[str]:
    """Event filters from a text field: one per line or separated by commas; blanks dropped."""
    return [f for f in (part.strip() for part in re.split(r"[,\n]", text)) if f]


async def edit_trigger(request: Request) -> Response:
    """Enable/disable a trigger or set a webhook's event filters (``PATCH /v1/triggers/{id}``)."""
    v = await viewer(request, post=True)
    trigger_id = uuid_param(request.path_params["trigger_id"], "trigger")
    trigger = await _trigger(v, trigger_id)
    back = f"/dashboard/autopilots/{trigger['autopilot_id']}"
    change: dict[str, Any] = {}
    if "enabled" in v.form:
        change["enabled"] = v.form["enabled"] == "true"
    if "event_filters" in v.form:
        change["event_filters"] = parse_filters(v.form["event_filters"])
    if not confirmed(v):
        shown = [(k, ", ".join(val) if isinstance(val, list) else ("yes" if val else "no"))
                 for k, val in change.items()]
        return confirm(v, "Change this trigger?", [("Trigger", str(trigger_id)), *shown], back)
    await admin_write(v, "PATCH", "/v1/triggers/{trigger_id}", {"trigger_id": trigger_id}, change)
    return RedirectResponse(f"{back}?done=saved", status_code=303)
