"""The operations dashboard at ``/dashboard``: server-rendered pages over the workspace of an API key.

Log in with an API key (POST form) → a signed session cookie (HttpOnly, SameSite=Strict, Secure when
PUBLIC_URL is https). Every POST form carries a CSRF token bound to the session, and a cross-origin
``Origin`` is refused. Every query is scoped to the key's workspace; every value is escaped by Jinja2's
autoescaping. No JavaScript: pages are plain HTML with forms.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from uuid import UUID

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from autopilot import replays, workspaces
from autopilot.workspaces import Principal
from gateway import overload, sessions
from gateway.admin import auth
from hookgate import logs
from hookgate.context import Context
from sql import Q

log = logging.getLogger("hookgate.dashboard")

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
FORM_LIMIT = 16 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}


class Denied(Exception):
    """A dashboard request that must not proceed (no session, bad CSRF token, foreign origin)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _ctx(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


def _signer(request: Request) -> sessions.Signer:
    state = request.app.state
    if getattr(state, "session_signer", None) is None:
        state.session_signer = sessions.Signer(_ctx(request).keyring)
    signer: sessions.Signer = state.session_signer
    return signer


def _secure(request: Request) -> bool:
    return _ctx(request).settings.public_url.startswith("https://")


def render(request: Request, name: str, code: int = 200, **values: Any) -> Response:
    """A page with the security headers; ``values`` are escaped by the template engine."""
    response = templates.TemplateResponse(request, name, values, status_code=code)
    response.headers.update(SECURITY_HEADERS)
    return response


async def _form(request: Request) -> dict[str, str]:
    """A small urlencoded form (first value of each field); larger bodies are refused.

    Read once per request and kept: a handler retried after a lost conflict (``overload.retried``) gets the
    same fields, while the body stream can be read only once.
    """
    if (kept := getattr(request.state, "form", None)) is not None:
        return kept  # type: ignore[no-any-return]
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_LIMIT:
            raise Denied(413, "form too large")
    request.state.form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", errors="replace")).items()}
    return request.state.form  # type: ignore[no-any-return]


def _check_origin(request: Request) -> None:
    """Refuse a POST whose Origin names another host (defence in depth next to SameSite and CSRF)."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise Denied(403, "cross-origin form refused")


async def _session(request: Request) -> tuple[Principal, sessions.Session] | None:
    """The logged-in principal, re-checked against the database (a revoked key ends its sessions)."""
    session = _signer(request).verify(request.cookies.get(sessions.SESSION_COOKIE))
    if session is None:
        return None
    async with overload.connection(_ctx(request)) as conn:
        row = await conn.fetchrow(Q.dashboard_principal, UUID(session.key_id))
    if row is None:
        return None
    logs.bind(member_id=str(row["member_id"]))
    return Principal(row["key_id"], row["member_id"], row["workspace_id"], row["role"], row["name"]), session


async def _require(request: Request, *, post: bool = False) -> tuple[Principal, sessions.Session, dict[str, str]]:
    """The principal of a page; for a POST also check origin and CSRF token and return the form."""
    form: dict[str, str] = {}
    if post:
        _check_origin(request)
        form = await _form(request)
    found = await _session(request)
    if found is None:
        raise Denied(401, "not logged in")
    principal, session = found
    if post and not _signer(request).csrf_ok(session.nonce, form.get("csrf")):
        raise Denied(403, "invalid CSRF token")
    return principal, session, form


def _denied(request: Request, exc: Denied) -> Response:
    if exc.status == 401 and request.method == "GET":
        return RedirectResponse("/dashboard/login", status_code=303)
    return render(request, "error.html", exc.status, message=str(exc))


async def login_page(request: Request) -> Response:
    """The login form, with a pre-session nonce cookie its CSRF token is bound to."""
    return _login_form(request)


def _login_form(request: Request, error: str | None = None, status: int = 200) -> Response:
    nonce = sessions.new_login_nonce()
    response = render(request, "login.html", status, csrf=_signer(request).csrf(nonce), error=error)
    response.set_cookie(sessions.LOGIN_COOKIE, nonce, max_age=3600, path="/dashboard", httponly=True,
                        samesite="strict", secure=_secure(request))
    return response


async def login(request: Request) -> Response:
    """Check the API key and the form's CSRF token; set the session cookie and go to the overview."""
    try:
        _check_origin(request)
        form = await _form(request)
    except Denied as exc:
        return _denied(request, exc)
    nonce = request.cookies.get(sessions.LOGIN_COOKIE, "")
    if not nonce or not _signer(request).csrf_ok(nonce, form.get("csrf")):
        return _login_form(request, "The form expired; please try again.", 403)
    async with overload.connection(_ctx(request)) as conn:
        principal = await workspaces.authenticate(conn, form.get("api_key", "").strip())
    if principal is None:
        return _login_form(request, "That API key is not valid.", 401)
    cookie, _ = _signer(request).issue(str(principal.key_id))
    response = RedirectResponse("/dashboard", status_code=303)
    response.set_cookie(sessions.SESSION_COOKIE, cookie, max_age=sessions.SESSION_TTL_S, path="/dashboard",
                        httponly=True, samesite="strict", secure=_secure(request))
    response.delete_cookie(sessions.LOGIN_COOKIE, path="/dashboard")
    log.info("dashboard login", extra={"member_id": str(principal.member_id)})
    return response


async def logout(request: Request) -> Response:
    """End the session (CSRF-checked) and return to the login page."""
    try:
        await _require(request, post=True)
    except Denied as exc:
        return _denied(request, exc)
    response = RedirectResponse("/dashboard/login", status_code=303)
    response.delete_cookie(sessions.SESSION_COOKIE, path="/dashboard")
    return response


async def overview(request: Request) -> Response:
    """Runtimes online, runs and deliveries today, expired leases, queues, failures, next fires."""
    try:
        principal, session, _ = await _require(request)
    except Denied as exc:
        return _denied(request, exc)
    ws = principal.workspace_id
    async with overload.connection(_ctx(request)) as conn:
        values = {
            "runtimes": await conn.fetch(Q.dashboard_runtimes_online, ws, _ctx(request).settings.heartbeat_timeout_s),
            "runs": await conn.fetch(Q.dashboard_runs_today, ws),
            "deliveries": await conn.fetch(Q.dashboard_deliveries_today, ws),
            "expired": await conn.fetchval(Q.dashboard_expired_leases_today, ws),
            "queues": await conn.fetch(Q.dashboard_queue_by_agent, ws),
            "failures": await conn.fetch(Q.dashboard_recent_failures, ws),
            "fires": await conn.fetch(Q.dashboard_next_fires, ws),
        }
    return render(request, "overview.html", **_page(request, principal, session), **values)


def _page(request: Request, principal: Principal, session: sessions.Session) -> dict[str, Any]:
    return {"principal": principal, "csrf": _signer(request).csrf(session.nonce),
            "now": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}


async def deliveries(request: Request) -> Response:
    """The newest deliveries (filter by status), each with its run and a replay button."""
    try:
        principal, session, _ = await _require(request)
    except Denied as exc:
        return _denied(request, exc)
    status = request.query_params.get("status") or None
    async with overload.connection(_ctx(request)) as conn:
        rows = await conn.fetch(Q.dashboard_deliveries, principal.workspace_id, status)
    return render(request, "deliveries.html", **_page(request, principal, session), rows=rows, status=status,
                  replayed=request.query_params.get("replayed"), problem=request.query_params.get("problem"))


async def replay(request: Request) -> Response:
    """Replay a delivery of the workspace as a new one (POST, CSRF-checked; writers of its autopilot)."""
    try:
        principal, _, _ = await _require(request, post=True)
    except Denied as exc:
        return _denied(request, exc)
    delivery_id = _uuid(request.path_params["delivery_id"])
    async with overload.connection(_ctx(request)) as conn:
        original = None if delivery_id is None else await conn.fetchrow(
            Q.dashboard_delivery_get, principal.workspace_id, delivery_id)
        if original is None:
            return render(request, "error.html", 404, message="no such delivery")
        autopilot = await conn.fetchrow(Q.autopilot_get, principal.workspace_id, original["autopilot_id"])
        if autopilot is None or not await auth.can_write(conn, principal, autopilot):
            return render(request, "error.html", 403,
                          message="only the autopilot's creator, collaborators, owners and admins may replay")
        try:
            made = await replays.replay(conn, original, principal.member_id,
                                        heartbeat_timeout_s=_ctx(request).settings.heartbeat_timeout_s)
        except replays.NotReplayable as exc:
            return RedirectResponse(f"/dashboard/deliveries?problem={exc.code}", status_code=303)
    log.info("dashboard replay", extra={"delivery_id": str(delivery_id), "new_delivery_id": str(made.delivery_id)})
    return RedirectResponse(f"/dashboard/deliveries?replayed={made.delivery_id}", status_code=303)


async def run_chain(request: Request) -> Response:
    """One run's chain: delivery → run → issue / task → result."""
    try:
        principal, session, _ = await _require(request)
    except Denied as exc:
        return _denied(request, exc)
    run_id = _uuid(request.path_params["run_id"])
    async with overload.connection(_ctx(request)) as conn:
        row = None if run_id is None else await conn.fetchrow(Q.dashboard_run_chain, principal.workspace_id, run_id)
    if row is None:
        return render(request, "error.html", 404, message="no such run")
    return render(request, "run.html", **_page(request, principal, session), run=row)


def _uuid(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None


# Retried whole on a deadlock or serialization failure: a page writes in one transaction at most (a replay).
routes = [
    Route("/dashboard", overload.retried(overview), methods=["GET"]),
    Route("/dashboard/login", login_page, methods=["GET"]),
    Route("/dashboard/login", overload.retried(login), methods=["POST"]),
    Route("/dashboard/logout", logout, methods=["POST"]),
    Route("/dashboard/deliveries", overload.retried(deliveries), methods=["GET"]),
    Route("/dashboard/deliveries/{delivery_id}/replay", overload.retried(replay), methods=["POST"]),
    Route("/dashboard/runs/{run_id}", overload.retried(run_chain), methods=["GET"]),
]
