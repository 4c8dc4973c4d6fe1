"""What every dashboard page shares: the session, CSRF and origin checks, rendering, and admin writes.

Log in with an API key (POST form) → a signed session cookie (HttpOnly, SameSite=Strict, Secure when
PUBLIC_URL is https) naming a session the database holds until logout (:mod:`gateway.sessions`). Every POST
form carries a CSRF token bound to the session, and a cross-origin ``Origin`` is refused. Every write runs the
admin API's own endpoint handler (same permission checks, validation and audit) under the logged-in member,
after a confirmation page.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit
from uuid import UUID

import asyncpg
from markupsafe import Markup
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from autopilot.workspaces import Principal
from gateway import admin, overload, sessions
from gateway.admin.openapi import Call, Endpoint
from gateway.errors import ApiError
from hookgate import logs
from hookgate.context import Context
from hookgate.database import Conn

templates = Jinja2Templates(directory=str(Path(__file__).parent.parent / "templates"))
FORM_LIMIT = 16 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
Page = Callable[[Request], Awaitable[Response]]


class Denied(Exception):
    """A dashboard request that must not proceed (no session, bad CSRF token, refused, not found)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Viewer:
    """The logged-in member of one page: who, their session, and the CSRF token for its forms."""

    def __init__(self, request: Request, principal: Principal, session: sessions.Session,
                 form: dict[str, str]) -> None:
        self.request, self.principal, self.session, self.form = request, principal, session, form
        self.csrf = signer(request).csrf(session.nonce)

    @property
    def workspace_id(self) -> UUID:
        """The workspace every query of the page is scoped to."""
        return self.principal.workspace_id

    def render(self, name: str, code: int = 200, **values: Any) -> Response:
        """A page of this member (their name in the header, the CSRF token in every form)."""
        return render(self.request, name, code, principal=self.principal, csrf=self.csrf, **values)


def ctx_of(request: Request) -> Context:
    """The application's context (pool, keyring, settings)."""
    ctx: Context = request.app.state.ctx
    return ctx


def signer(request: Request) -> sessions.Signer:
    """The session and CSRF signer, made once per application from the keyring."""
    state = request.app.state
    if getattr(state, "session_signer", None) is None:
        state.session_signer = sessions.Signer(ctx_of(request).keyring)
    found: sessions.Signer = state.session_signer
    return found


def secure(request: Request) -> bool:
    """Cookies get ``Secure`` when the public URL is https."""
    return ctx_of(request).settings.public_url.startswith("https://")


def render(request: Request, name: str, code: int = 200, **values: Any) -> Response:
    """A page with the security headers; ``values`` are escaped by the template engine."""
    response = templates.TemplateResponse(request, name, values, status_code=code)
    response.headers.update(SECURITY_HEADERS)
    return response


async def read_form(request: Request) -> dict[str, str]:
    """A small urlencoded form (first value of each field); larger bodies and NUL characters are refused.

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
    form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", errors="replace")).items()}
    if any("\x00" in v for v in form.values()):  # PostgreSQL text cannot hold NUL: refuse it here, not as a 5xx
        raise Denied(400, "a form field holds a NUL character")
    request.state.form = form
    return form


def check_origin(request: Request) -> None:
    """Refuse a POST whose Origin names another host (defence in depth next to SameSite and CSRF)."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise Denied(403, "cross-origin form refused")


async def _session(request: Request) -> tuple[Principal, sessions.Session] | None:
    """The logged-in principal, re-checked against the database (logging out or revoking the key ends it)."""
    session = signer(request).verify(request.cookies.get(sessions.SESSION_COOKIE))
    if session is None:
        return None
    async with overload.connection(ctx_of(request)) as conn:
        row = await sessions.principal_row(conn, session)
    if row is None:
        return None
    logs.bind(member_id=str(row["member_id"]))
    return Principal(row["key_id"], row["member_id"], row["workspace_id"], row["role"], row["name"]), session


async def viewer(request: Request, *, post: bool = False) -> Viewer:
    """The member of a page; for a POST also check origin and CSRF token and keep the form."""
    form: dict[str, str] = {}
    if post:
        check_origin(request)
        form = await read_form(request)
    found = await _session(request)
    if found is None:
        raise Denied(401, "not logged in")
    principal, session = found
    if post and not signer(request).csrf_ok(session.nonce, form.get("csrf")):
        raise Denied(403, "invalid CSRF token")
    return Viewer(request, principal, session, form)


def page(handler: Callable[[Request], Awaitable[Response]]) -> Page:
    """A page handler whose refusal becomes the login redirect (GET, no session) or an error page."""
    async def serve(request: Request) -> Response:
        try:
            return await handler(request)
        except Denied as exc:
            return denied(request, exc)
        except ApiError as exc:  # a shared admin helper's refusal (e.g. auth.autopilot_of): the same page
            if exc.status >= 500:  # overload's 503 + Retry-After keeps its own answer
                raise
            return denied(request, Denied(exc.status, exc.message or exc.code))

    serve.__name__ = serve.__qualname__ = handler.__name__
    serve.__doc__ = handler.__doc__
    return overload.retried(serve)


def denied(request: Request, exc: Denied) -> Response:
    """The answer to a refused request: to the login page without a session, else an error page."""
    if exc.status == 401 and request.method == "GET":
        return RedirectResponse("/dashboard/login", status_code=303)
    return render(request, "error.html", exc.status, message=str(exc))


def uuid_param(text: str | None, kind: str) -> UUID:
    """A path id; a malformed one cannot exist, so it is a 404 like another workspace's id."""
    try:
        return UUID(str(text))
    except ValueError:
        raise Denied(404, f"no such {kind}") from None


def confirmed(v: Viewer) -> bool:
    """True once the member confirmed on the confirmation page (every write asks first)."""
    return v.form.get("confirmed") == "yes"


def confirm(v: Viewer, question: str, details: list[tuple[str, str]] | None = None,
            back: str = "/dashboard") -> Response:
    """The confirmation page of a write: the same form again, with ``confirmed=yes`` and a Cancel link."""
    fields = {k: val for k, val in v.form.items() if k not in ("csrf", "confirmed")}
    return v.render("confirm.html", question=question, action=v.request.url.path, fields=fields,
                    details=details or [], back=back)


# --- Writes through the admin API's own handlers -------------------------------------------------------

_ENDPOINTS: dict[tuple[str, str], Endpoint] = {(e.method, e.path): e for e in admin.ENDPOINTS}


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


async def admin_write(v: Viewer, method: str, path: str, ids: dict[str, UUID], body: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
    """Run the admin endpoint ``method path`` as the logged-in member, in one transaction; its JSON answer.

    The endpoint's own body model, permission checks, domain function and audit entry apply, so the
    dashboard has no second copy of any rule. Its refusals become :class:`Denied` with the same status.
    """
    endpoint = _ENDPOINTS[(method, path)]
    try:
        parsed = endpoint.body.model_validate(body or {}) if endpoint.body is not None else None
    except ValidationError as exc:
        raise Denied(422, _validation_message(exc)) from None
    async with overload.connection(ctx_of(v.request)) as conn:
        try:
            async with conn.transaction():
                return await _handled(v, conn, endpoint, ids, parsed, None)
        except (asyncpg.IntegrityConstraintViolationError, asyncpg.DataError):
            raise Denied(422, "the values were refused by the database constraints") from None


async def admin_read(v: Viewer, conn: Conn, method: str, path: str, ids: dict[str, UUID],
                     query: BaseModel | None = None) -> dict[str, Any]:
    """Run the admin read endpoint ``method path`` as the member: a page shows what the API would show them."""
    return await _handled(v, conn, _ENDPOINTS[(method, path)], ids, None, query)


async def _handled(v: Viewer, conn: Conn, endpoint: Endpoint, ids: dict[str, UUID], body: BaseModel | None,
                   query: BaseModel | None) -> dict[str, Any]:
    """The endpoint's handler run as the member, its answer as JSON; its refusal as :class:`Denied`."""
    try:
        reply = await endpoint.handler(Call(v.request, ctx_of(v.request), conn, v.principal, ids, body, query))
    except ApiError as exc:
        raise Denied(exc.status, exc.message or exc.code) from None
    return reply.model_dump(mode="json") if isinstance(reply, BaseModel) else reply


# --- Template helpers --------------------------------------------------------------------------------

def _ago(seconds: float) -> str:
    future, s = seconds < 0, abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            text = f"{int(s // size)} {unit}"
            break
    else:
        text = f"{int(s)} s"
    return f"in {text}" if future else f"{text} ago"


def when(value: datetime | str | None) -> Markup:
    """``<time>`` with a relative text and the exact UTC time on hover (empty for None)."""
    if value is None or value == "":
        return Markup("")
    at = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value
    at = at.astimezone(UTC)
    exact = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    text = _ago((datetime.now(UTC) - at).total_seconds())
    return Markup('<time datetime="{}" title="{}">{}</time>').format(at.isoformat(), exact, text)


def pretty(value: Any) -> str:
    """JSON indented for reading (any value; text that is not JSON is shown as it is)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def query_with(params: dict[str, Any], **changes: Any) -> str:
    """A query string: ``params`` with ``changes`` applied, empty values left out."""
    merged = {k: v for k, v in (params | changes).items() if v not in (None, "")}
    return "?" + urlencode(merged) if merged else ""


templates.env.filters["when"] = when
templates.env.filters["pretty"] = pretty
templates.env.globals["query_with"] = query_with
