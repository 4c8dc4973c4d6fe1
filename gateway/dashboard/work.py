"""An issue's page and a task's page: read-only views of the work a run made.

Both show what the admin API shows the member (``GET /v1/issues/{id}``, ``GET /v1/tasks/{id}`` and its
attempts, through the endpoints' own handlers), so another workspace's id is a 404 like everywhere else. A
task's attempts are rendered as on the run page, the agent's answer for writers of its autopilot only (the
API's own choice: owners and admins for a task without an autopilot).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway import overload
from gateway.admin import auth
from gateway.admin.pagination import PageQuery
from gateway.dashboard.web import admin_read, ctx_of, uuid_param, viewer
from sql import Q

#: The attempts a task's page lists (a task has a handful; the API's page maximum).
ATTEMPTS_SHOWN = 500


async def issue(request: Request) -> Response:
    """One issue: its status, title and body, its autopilot and run, the tasks made for it."""
    v = await viewer(request)
    issue_id = uuid_param(request.path_params["issue_id"], "issue")
    async with overload.connection(ctx_of(request)) as conn:
        row = await admin_read(v, conn, "GET", "/v1/issues/{issue_id}", {"issue_id": issue_id})
        context = await conn.fetchrow(Q.dashboard_issue_context, v.workspace_id, issue_id)
        tasks = await conn.fetch(Q.dashboard_issue_tasks, v.workspace_id, issue_id)
    return v.render("issue.html", i=row, context=context, tasks=tasks)


async def task(request: Request) -> Response:
    """One task: its status, agent, run and issue, attempt count, times, last error, result and every attempt."""
    v = await viewer(request)
    task_id = uuid_param(request.path_params["task_id"], "task")
    async with overload.connection(ctx_of(request)) as conn:
        row = await admin_read(v, conn, "GET", "/v1/tasks/{task_id}", {"task_id": task_id})
        context = await conn.fetchrow(Q.dashboard_task_context, v.workspace_id, task_id)
        attempts = await admin_read(v, conn, "GET", "/v1/tasks/{task_id}/attempts", {"task_id": task_id},
                                    PageQuery(limit=ATTEMPTS_SHOWN))
        writer = await auth.may_read_answers(conn, v.principal, context["autopilot_id"] if context else None)
    return v.render("task.html", t=row, context=context, attempts=attempts["items"], writer=writer)
