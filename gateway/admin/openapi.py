"""Typed admin endpoints: one declaration gives the Starlette route and its OpenAPI operation.

An endpoint names its request body, query and response as pydantic models; the wrapper authenticates the
``hgk_`` key, then reads the body within ``api_max_body_bytes`` (413) and parses it with the JSON nesting
limit of :mod:`gateway.bodies` (400 ``invalid_json``), validates path/query/body (422 with the pydantic
errors, never a stack trace), hands the handler a :class:`Call` holding one pooled connection in one
transaction (run again whole after a lost deadlock or serialization failure), and renders the model as
JSON. ``/openapi.json`` is built from the same declarations, so the documented schema is the one the
code validates against; the runtime API and the webhook ingress add theirs as :class:`Operation` values.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from autopilot.workspaces import Principal
from gateway import bodies, debt, overload
from gateway.admin import auth, idempotency
from gateway.errors import ApiError
from hookgate import jsontext, logs
from hookgate.context import Context
from hookgate.database import Conn

Reply = BaseModel | dict[str, Any]
Handler = Callable[["Call"], Awaitable[Reply]]


class Error(BaseModel):
    """Every error a client sees: a machine-readable code and a sentence."""

    error: str
    message: str


@dataclass
class Call:
    """What a handler gets: the request, the context, the caller, validated inputs, one connection."""

    request: Request
    ctx: Context
    conn: Conn
    principal: Principal
    path: dict[str, UUID]
    body: Any
    query: Any
    idempotency: idempotency.Scope | None = None  # the endpoint honours Idempotency-Key and the request sent one

    async def scoped(self, query: str, kind: str) -> asyncpg.Record:
        """The row ``query`` finds in the caller's workspace for the path's ``<kind>_id``; else that 404."""
        row = await self.conn.fetchrow(query, self.principal.workspace_id, self.path[f"{kind}_id"])
        return auth.found(row, kind)

    async def once(self, write: Callable[[], Awaitable[Reply]]) -> Reply:
        """Run the handler's ``write`` once per ``Idempotency-Key`` (if sent); a repeat gets the first reply.

        Call it after the permission checks, so a caller who may no longer write is refused, not replayed.
        """
        if self.idempotency is None:
            return await write()

        async def rendered() -> dict[str, Any]:
            return _payload(await write())

        return await idempotency.once(self.conn, self.idempotency, rendered)


@dataclass
class Endpoint:
    """One admin operation: method, path template, models, status and documentation."""

    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    response: type[BaseModel] | None
    status: int = 200
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    idempotent: bool = False
    description: str = ""

    def route(self) -> BaseRoute:
        """The Starlette route running this endpoint."""
        return Route(self.path, overload.retried(self._serve), methods=[self.method],
                     name=f"{self.method} {self.path}")

    async def _serve(self, request: Request) -> Response:
        """Authenticate, validate, then run the handler in ONE transaction: an error rolls all of it back.

        So a deadlock or serialization failure can be retried whole (``overload.retried``), and nothing
        is answered before the commit.
        """
        ctx: Context = request.app.state.ctx
        debtor = debt.admitted(request)  # an address in bad-credential debt is refused before any database work
        async with overload.connection(ctx) as conn:  # bounded wait: 503 + Retry-After when saturated
            principal = await auth.authenticate(conn, request, debtor)
            path = _path_ids(request)
            logs.bind(**{name: str(value) for name, value in path.items()})  # run_id, trigger_id, … in logs
            query = validated(self.query, dict(request.query_params)) if self.query else None
            raw = await _json_body(request, ctx.settings.api_max_body_bytes) if self.body else None
            body = validated(self.body, raw) if self.body else None
            call = Call(request, ctx, conn, principal, path, body, query, self._idempotency(request, principal, body))
            try:
                async with conn.transaction():
                    status, payload = await self._run(call)
            except asyncpg.PostgresError as exc:
                mapped = _database_error(exc)
                if mapped is None:
                    raise
                raise mapped from exc
        return JSONResponse(payload, status_code=status)

    def _idempotency(self, request: Request, principal: Principal, body: Any) -> idempotency.Scope | None:
        key = request.headers.get("idempotency-key")
        if not self.idempotent or key is None:
            return None
        return idempotency.scope(principal, request.method, request.url.path, key, body_digest(body))

    async def _run(self, call: Call) -> tuple[int, Any]:
        return self.status, _payload(await self.handler(call))


@dataclass
class Endpoints:
    """The endpoints of one resource module, registered with decorators."""

    tag: str
    items: list[Endpoint] = field(default_factory=list)

    def add(self, method: str, path: str, *, summary: str, response: type[BaseModel] | None,
            status: int = 200, body: type[BaseModel] | None = None, query: type[BaseModel] | None = None,
            idempotent: bool = False) -> Callable[[Handler], Handler]:
        """Register the decorated handler as ``method path``.

        ``idempotent``: the endpoint honours ``Idempotency-Key``; its handler does its write in ``call.once``.
        """
        def register(handler: Handler) -> Handler:
            self.items.append(Endpoint(method, path, handler, summary, self.tag, response, status, body, query,
                                       idempotent, (handler.__doc__ or "").strip()))
            return handler
        return register


def _payload(reply: Reply) -> dict[str, Any]:
    return reply.model_dump(mode="json") if isinstance(reply, BaseModel) else reply


def body_digest(body: Any) -> str:
    """A stable digest of a validated request body (same JSON, same digest)."""
    import hashlib

    data = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def validated(model: type[BaseModel], data: Any) -> BaseModel:
    """``data`` as ``model``, or 422 ``invalid_request`` naming the first refused field (every one in ``detail``).

    A model may name its own code for a field (``error_codes``: ``{"reply": "invalid_reply"}``).

    The one validation of request inputs: admin bodies and queries, and the runtime API's bodies.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
        what = errors[0]["msg"] if errors else "invalid"
        codes: dict[str, str] = getattr(model, "error_codes", {})
        code = next((codes[str(p)] for p in errors[0]["loc"] if str(p) in codes), "invalid_request") if errors else (
            "invalid_request")
        raise ApiError(422, code, f"{where}: {what}" if where else what,
                       detail=[{"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
                               for e in errors]) from None


def patch_fields(body: BaseModel, nullable: Collection[str] = ()) -> dict[str, Any]:
    """The fields a PATCH body sent (an absent one stays as it is); 422 for a ``null`` outside ``nullable``.

    Absent and ``null`` must not mean the same, or ``{"role": null}`` would quietly change nothing.
    """
    sent = body.model_dump(exclude_unset=True)
    refused = [name for name, value in sent.items() if value is None and name not in nullable]
    if refused:
        raise ApiError(422, "invalid_request", f"{refused[0]}: may not be null",
                       detail=[{"loc": [name], "msg": "may not be null", "type": "null"} for name in refused])
    return sent


async def _json_body(request: Request, cap: int) -> Any:
    """The body as JSON, read within ``cap`` (413) and nested no deeper than the limit (400)."""
    raw = await bodies.read_body(request, cap)
    if not raw.strip():
        return {}
    try:
        return jsontext.loads(raw)
    except jsontext.TooDeep:
        raise ApiError(400, "invalid_json", f"the JSON is nested deeper than {jsontext.MAX_DEPTH} levels") from None
    except ValueError:  # UnicodeDecodeError included
        raise ApiError(400, "invalid_json", "the request body is not valid JSON") from None


def _path_ids(request: Request) -> dict[str, UUID]:
    """Every path parameter is an id; a malformed one cannot exist, so it is a 404 like any unknown id."""
    found = {}
    for name, value in request.path_params.items():
        try:
            found[name] = UUID(str(value))
        except ValueError:
            raise ApiError(404, "not_found", f"no such {name.removesuffix('_id') or 'resource'}") from None
    return found


def _database_error(exc: asyncpg.PostgresError) -> ApiError | None:
    """Constraint and data errors are the client's (by SQLSTATE class); anything else is a bug (None)."""
    if isinstance(exc, asyncpg.UniqueViolationError):
        return ApiError(409, "conflict", "a resource with these values already exists")
    if isinstance(exc, asyncpg.IntegrityConstraintViolationError | asyncpg.DataError):
        return ApiError(422, "invalid_request", "the values were refused by the database constraints")
    return None


# ---------------------------------------------------------------------------------------------------
# The OpenAPI document
# ---------------------------------------------------------------------------------------------------

_ERRORS = {400: "Malformed request", 401: "Missing or unknown API key", 403: "Not allowed for this member",
           404: "Not found in this workspace", 409: "Conflicts with the current state",
           422: "Request failed validation",
           429: "Too many bad credentials from this address (`rate_limited`); retry after Retry-After"}
_BODY_ERRORS = {413: "Request body too large"}
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "An admin API key, `hgk_…`."},
    "runtimeToken": {"type": "http", "scheme": "bearer",
                     "description": "A pull agent's runtime token, `hgr_…` (shown once when the agent is created)."},
}
"""``bearer``: the admin API; ``runtimeToken``: the runtime API. The webhook token travels in the path."""


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before trying again",
                                "schema": {"type": "string", "pattern": "^[0-9]+$"}}}


@dataclass(frozen=True)
class Answer:
    """One documented status of an :class:`Operation`: a sentence, the JSON shapes its body may take, headers."""

    description: str
    models: tuple[type[BaseModel], ...] = ()
    """No model: no body (204). Several: the body is one of them."""
    retry_after: bool = False
    text: bool = False
    """The body may also be text (a handshake's echo, a trigger's own reply) rather than JSON."""


@dataclass(frozen=True)
class Operation:
    """An operation outside the typed admin endpoints (runtime API, webhook ingress), documented beside them."""

    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    answers: dict[int, Answer]
    security: tuple[dict[str, list[str]], ...]
    """Alternatives, any one suffices; ``{}`` among them: no credential at all is also accepted."""
    body: dict[str, type[BaseModel]] = field(default_factory=dict)
    """The request body model by media type."""
    parameters: tuple[dict[str, Any], ...] = ()
    description: str = ""


def document(endpoints: list[Endpoint], version: str, operations: Sequence[Operation] = ()) -> dict[str, Any]:
    """The OpenAPI 3.1 document for ``endpoints`` and ``operations``, schemas generated from their pydantic models."""
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(Error, "serialization")]
    for e in endpoints:
        wanted += [(e.body, "validation")] if e.body else []
        wanted += [(e.response, "serialization")] if e.response else []
    for o in operations:
        wanted += [(model, "validation") for model in o.body.values()]
        wanted += [(model, "serialization") for answer in o.answers.values() for model in answer.models]
    refs, defs = models_json_schema(list(dict.fromkeys(wanted)), ref_template="#/components/schemas/{model}")
    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        paths.setdefault(e.path, {})[e.method.lower()] = _operation(e, refs)
    for o in operations:
        paths.setdefault(o.path, {})[o.method.lower()] = _documented(o, refs)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Hookgate API", "version": version,
                 "description": "Hookgate's HTTP surface: the admin API (bearer `hgk_` keys, docs/API.md), the "
                                "runtime API of agents (`hgr_` runtime tokens or a lease token, docs/DISPATCH.md) "
                                "and the webhook ingress (the trigger's token in the path, docs/PROVIDERS.md)."},
        "paths": paths,
        "components": {"schemas": defs.get("$defs", {}), "securitySchemes": SECURITY_SCHEMES},
        "security": [{"bearer": []}],
    }


def _documented(o: Operation, refs: dict[Any, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": o.operation_id, "summary": o.summary, "tags": [o.tag],
                          "security": list(o.security), "parameters": [
                              *({"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                                for name in _path_names(o.path) if name not in {p["name"] for p in o.parameters}),
                              *o.parameters]}
    if o.description:
        op["description"] = o.description
    if o.body:
        op["requestBody"] = {"required": False, "content": {
            media: {"schema": refs[(model, "validation")]} for media, model in o.body.items()}}
    op["responses"] = {str(status): _answer(answer, refs) for status, answer in sorted(o.answers.items())}
    return op


def _answer(answer: Answer, refs: dict[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"description": answer.description}
    schemas = [refs[(model, "serialization")] for model in answer.models]
    if schemas:
        out["content"] = {"application/json": {"schema": schemas[0] if len(schemas) == 1 else {"oneOf": schemas}}}
    if answer.text:
        out.setdefault("content", {})["text/plain"] = {"schema": {"type": "string"}}
    if answer.retry_after:
        out["headers"] = _RETRY_AFTER
    return out


def _operation(e: Endpoint, refs: dict[Any, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": e.handler.__name__, "summary": e.summary, "tags": [e.tag],
                          "parameters": _parameters(e)}
    if e.description:
        op["description"] = e.description
    if e.body:
        op["requestBody"] = {"required": False, "content": {
            "application/json": {"schema": refs[(e.body, "validation")]}}}
    ok: dict[str, Any] = {"description": "OK"}
    if e.response:
        ok["content"] = {"application/json": {"schema": refs[(e.response, "serialization")]}}
    error = {"content": {"application/json": {"schema": refs[(Error, "serialization")]}}}
    errors = _ERRORS | _BODY_ERRORS if e.body else _ERRORS
    op["responses"] = {str(e.status): ok} | {str(code): {"description": text, **error}
                                             for code, text in sorted(errors.items())}
    op["responses"]["429"]["headers"] = _RETRY_AFTER
    return op


def _parameters(e: Endpoint) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
        for name in _path_names(e.path)
    ]
    if e.query:
        properties = e.query.model_json_schema()["properties"]
        for name, schema in properties.items():
            params.append({"name": name, "in": "query", "required": False, "schema": _non_null(schema)})
    if e.idempotent:
        params.append({"name": "Idempotency-Key", "in": "header", "required": False,
                       "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}})
    return params


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _non_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter is absent or has a value: drop the ``null`` branch pydantic adds for Optional."""
    options = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
    if len(options) == 1:
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        return {**rest, **options[0]}
    return {k: v for k, v in schema.items() if k != "default" or v is not None}
