"""A run's page: the timeline delivery → run → issue → task, every attempt of its tasks, cancel and retry.

Attempts are rendered by the admin API's own ``attempt_out``: the agent's answer (kept headers and body
excerpt) only for writers of the run's autopilot, as ``GET /v1/tasks/{id}/attempts`` shows it; so is each
task's ``result`` (``without_answer``, as ``GET /v1/tasks/{id}``). When the run
waits for its next attempt, the page says when (the API's ``next_attempt_at``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from autopilot import reruns
from gateway import overload
from gateway.admin import auth
from gateway.admin.attempts import attempt_out
from gateway.admin.issues import without_answer
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
from sql import Q

log = logging.getLogger("hookgate.dashboard")
FINISHED = ("completed", "failed", "cancelled", "skipped")


async def run(request: Request) -> Response:
    """The run with what it came from and what it made; writers of its autopilot get cancel and retry buttons."""
    v = await viewer(request)
    run_id = uuid_param(request.path_params["run_id"], "run")
    async with overload.connection(ctx_of(request)) as conn:
        row = await conn.fetchrow(Q.dashboard_run_chain, v.workspace_id, run_id)
        if row is None:
            raise Denied(404, "no such run")
        autopilot = await auth.autopilot_of(conn, v.principal, row["autopilot_id"])
        writer = await auth.can_write(conn, v.principal, autopilot)
        tasks = [without_answer(t, full=writer) for t in await conn.fetch(Q.dashboard_run_tasks, v.workspace_id,
                                                                          run_id)]
        attempts = [attempt_out(a, full=writer).model_dump(mode="json")
                    for a in await conn.fetch(Q.dashboard_run_attempts, v.workspace_id, run_id)]
        shown = await admin_read(v, conn, "GET", "/v1/runs/{run_id}", {"run_id": run_id})
    return v.render("run.html", run=row, tasks=tasks, writer=writer, finished=row["status"] in FINISHED,
                    retryable=row["status"] in reruns.RETRYABLE, attempts=attempts,
                    next_attempt_at=_ahead(shown.get("next_attempt_at")), probe=_probe(shown, tasks),
                    cancelled=request.query_params.get("cancelled") == "1",
                    retried=request.query_params.get("retried") == "1")


def _ahead(at: Any) -> str | None:
    """``next_attempt_at`` when it is still ahead (a due attempt is not "waiting": it is about to be taken)."""
    if not at:
        return None
    return str(at) if datetime.fromisoformat(str(at).replace("Z", "+00:00")) > datetime.now(UTC) else None


def _probe(shown: dict[str, Any], tasks: list[Any]) -> datetime | None:
    """The next probe of the agent the run's task waits for, while its circuit is open (the API's ``waiting``)."""
    if not shown.get("waiting"):
        return None
    probe: datetime | None = next((t["agent_next_probe_at"] for t in tasks if str(t["id"]) == shown["task_id"]),
                                  None)
    return probe


async def _confirm(request: Request, v: Viewer, run_id: UUID, question: str) -> Response:
    """The confirmation page of a write on a run of the viewer's workspace (404 for any other run)."""
    async with overload.connection(ctx_of(request)) as conn:
        row = await conn.fetchrow(Q.dashboard_run_chain, v.workspace_id, run_id)
    if row is None:
        raise Denied(404, "no such run")
    return confirm(v, question, [("Run", str(run_id)), ("Status", row["status"]), ("Autopilot", row["autopilot"])],
                   f"/dashboard/runs/{run_id}")


async def cancel(request: Request) -> Response:
    """Cancel an unfinished run through the admin API's cancel (writers only), after a confirmation page."""
    v = await viewer(request, post=True)
    run_id = uuid_param(request.path_params["run_id"], "run")
    if not confirmed(v):
        return await _confirm(request, v, run_id, "Cancel this run? Its queued and running tasks are cancelled "
                              "too; a push in flight is aborted, and an agent holding a task is told to stop.")
    reason = v.form.get("reason", "").strip() or "cancelled from the dashboard"
    await admin_write(v, "POST", "/v1/runs/{run_id}/cancel", {"run_id": run_id}, {"reason": reason})
    log.info("dashboard cancel", extra={"run_id": str(run_id)})
    return RedirectResponse(f"/dashboard/runs/{run_id}?cancelled=1", status_code=303)


async def retry(request: Request) -> Response:
    """Retry a failed or cancelled run through the admin API's retry (writers only), after a confirmation page.

    The run gets one more task, for the agent its autopilot's assignee resolves to now, and is queued again.
    """
    v = await viewer(request, post=True)
    run_id = uuid_param(request.path_params["run_id"], "run")
    if not confirmed(v):
        return await _confirm(request, v, run_id, "Retry this run? It gets one more task, sent to the autopilot's "
                              "agent (a squad: its leader) as it is now, and is queued again.")
    made = await admin_write(v, "POST", "/v1/runs/{run_id}/retry", {"run_id": run_id})
    log.info("dashboard retry", extra={"run_id": str(run_id), "task_id": made["task_id"]})
    return RedirectResponse(f"/dashboard/runs/{run_id}?retried=1", status_code=303)
