"""Logging in and out of the dashboard, and ``GET /`` leading a browser to it.

A wrong API key at the login adds to the address's bad-credential debt (:mod:`gateway.debt`), and an address
over the cap gets 429 + Retry-After before its key is looked up. Logout deletes the session's row, so the
cookie is refused from then on even if replayed.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from autopilot import workspaces
from gateway import debt, overload, sessions
from gateway.dashboard.web import Denied, check_origin, ctx_of, denied, read_form, render, secure, signer, viewer

log = logging.getLogger("hookgate.dashboard")


async def root(request: Request) -> Response:
    """``GET /``: a browser lands on the dashboard (which asks for a login first)."""
    return RedirectResponse("/dashboard", status_code=303)


async def login_page(request: Request) -> Response:
    """The login form, with a pre-session nonce cookie its CSRF token is bound to."""
    return _login_form(request)


def _login_form(request: Request, error: str | None = None, status: int = 200,
                headers: dict[str, str] | None = None) -> Response:
    nonce = sessions.new_login_nonce()
    response = render(request, "login.html", status, csrf=signer(request).csrf(nonce), error=error)
    response.headers.update(headers or {})
    response.set_cookie(sessions.LOGIN_COOKIE, nonce, max_age=3600, path="/dashboard", httponly=True,
                        samesite="strict", secure=secure(request))
    return response


async def login(request: Request) -> Response:
    """Check the API key and the form's CSRF token; set the session cookie and go to the overview."""
    debtor = debt.debtor(request)
    if (wait := debtor.due()) is not None:  # before the form is read or any key looked up
        return _login_form(request, f"Too many failed logins from this address; try again in {wait} s.", 429,
                           {"Retry-After": str(wait)})
    try:
        check_origin(request)
        form = await read_form(request)
    except Denied as exc:
        return denied(request, exc)
    nonce = request.cookies.get(sessions.LOGIN_COOKIE, "")
    if not nonce or not signer(request).csrf_ok(nonce, form.get("csrf")):
        return _login_form(request, "The form expired; please try again.", 403)
    async with overload.connection(ctx_of(request)) as conn:
        principal = await workspaces.authenticate(conn, form.get("api_key", "").strip())
        if principal is None:
            debtor.charge()
            return _login_form(request, "That API key is not valid.", 401)
        cookie, session = signer(request).issue(str(principal.key_id))
        await sessions.start(conn, session)
    response = RedirectResponse("/dashboard", status_code=303)
    response.set_cookie(sessions.SESSION_COOKIE, cookie, max_age=sessions.SESSION_TTL_S, path="/dashboard",
                        httponly=True, samesite="strict", secure=secure(request))
    response.delete_cookie(sessions.LOGIN_COOKIE, path="/dashboard")
    log.info("dashboard login", extra={"member_id": str(principal.member_id)})
    return response


async def logout(request: Request) -> Response:
    """End the session on the server (CSRF-checked): its cookie is refused from now on, even if replayed."""
    try:
        v = await viewer(request, post=True)
    except Denied as exc:
        return denied(request, exc)
    async with overload.connection(ctx_of(request)) as conn:
        await sessions.end(conn, v.session)
    response = RedirectResponse("/dashboard/login", status_code=303)
    response.delete_cookie(sessions.SESSION_COOKIE, path="/dashboard")
    return response
