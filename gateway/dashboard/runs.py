"""A run's page: the timeline delivery → run → issue → task (every attempt), and its cancel button."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway import overload
from gateway.admin import auth
from gateway.dashboard.web import Denied, admin_write, confirm, confirmed, ctx_of, uuid_param, viewer
from sql import Q

log = logging.getLogger("hookgate.dashboard")
FINISHED = ("completed", "failed", "cancelled", "skipped")


async def run(request: Request) -> Response:
    """The run with what it came from and what it made; writers of its autopilot get a cancel button."""
    v = await viewer(request)
    run_id = uuid_param(request.path_params["run_id"], "run")
    async with overload.connection(ctx_of(request)) as conn:
        row = await conn.fetchrow(Q.dashboard_run_chain, v.workspace_id, run_id)
        if row is None:
            raise Denied(404, "no such run")
        tasks = await conn.fetch(Q.dashboard_run_tasks, v.workspace_id, run_id)
        autopilot = await auth.autopilot_of(conn, v.principal, row["autopilot_id"])
        writer = await auth.can_write(conn, v.principal, autopilot)
    return v.render("run.html", run=row, tasks=tasks, writer=writer, finished=row["status"] in FINISHED,
                    cancelled=request.query_params.get("cancelled") == "1")


async def cancel(request: Request) -> Response:
    """Cancel an unfinished run through the admin API's cancel (writers only), after a confirmation page."""
    v = await viewer(request, post=True)
    run_id = uuid_param(request.path_params["run_id"], "run")
    if not confirmed(v):
        async with overload.connection(ctx_of(request)) as conn:
            row = await conn.fetchrow(Q.dashboard_run_chain, v.workspace_id, run_id)
        if row is None:
            raise Denied(404, "no such run")
        return confirm(v, "Cancel this run? Its queued and running tasks are cancelled too; a push in "
                          "flight is aborted, and an agent holding a task is told to stop.",
                       [("Run", str(run_id)), ("Status", row["status"]), ("Autopilot", row["autopilot"])],
                       f"/dashboard/runs/{run_id}")
    reason = v.form.get("reason", "").strip() or "cancelled from the dashboard"
    await admin_write(v, "POST", "/v1/runs/{run_id}/cancel", {"run_id": run_id}, {"reason": reason})
    log.info("dashboard cancel", extra={"run_id": str(run_id)})
    return RedirectResponse(f"/dashboard/runs/{run_id}?cancelled=1", status_code=303)
