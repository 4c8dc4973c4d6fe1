"""The runtime API for pull agents (ARCHITECTURE §7, §11): heartbeat, claim (long-poll), renew, report.

Pull runtimes authenticate with their ``hgr_`` bearer token (looked up by digest). Renew and report are
also how an HTTP agent that answered a push with 202 finishes its task: it has no ``hgr_`` token, so for a
task of an HTTP agent the request may carry no bearer and the lease token in the body is the capability
(a random UUID given only to the current holder, in the push body). A stale or foreign lease token gets
409 ``{"error":"lease_lost"}``, is recorded as LATE_RESULT and changes nothing; the same report repeated
by the holder gets 200 again. A task cancelled while the caller's lease held it (its run cancelled or past
its deadline, its issue closed) answers that lease's renew and report with 409 ``{"error":"cancelled"}``:
stop working on it. The runtime instance is named by the optional ``instance`` body field.

Credentials come before bodies: a runtime token is checked (and, for renew and report, that the task is
the caller's, or an HTTP agent's when no token is sent) before a byte of the body is read; bodies are read
with the ``api_max_body_bytes`` cap (413) and JSON nested too deep is a 400 (:mod:`gateway.bodies`). Every
request is first checked against its address's bad-credential debt (:mod:`gateway.debt`, shared with the
ingress, the admin API and the dashboard login): 429 while in debt, before any token is looked up. A refused
runtime token (missing, malformed or unknown) adds one to the debt, and so do the refusals of a caller without
a runtime token, who proves nothing but the lease token it sends (unknown task, or a wrong lease token, audited
with only the size and digest of its body).

A claim with ``wait_s`` waits in the process's :class:`gateway.claim_wait.ClaimWaits` (woken by NOTIFY
``hookgate_tasks``, with a poll fallback). A task won for a runtime that hung up meanwhile is handed back
at once, its attempt not counted, so it is not stuck until the lease or the heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

import asyncpg
from pydantic import BaseModel, BeforeValidator, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from autopilot import agents, tasks
from gateway import bodies, debt, overload
from gateway.admin.openapi import Answer, Error, Operation, validated
from gateway.claim_wait import ClaimWaits
from gateway.errors import ApiError
from hookgate import crypto, jsontext, notify
from hookgate.context import Context
from hookgate.database import Conn
from hookgate.errors import LeaseLost, TaskCancelled
from hookgate.settings import CLAIM_WAIT_CEILING_S
from sql import Q

DEFAULT_INSTANCE = "default"


# -- bodies and answers, as documented in /openapi.json -------------------------------------------------


class HeartbeatBody(BaseModel):
    """Which instance of the runtime is alive."""

    instance: str = Field(default=DEFAULT_INSTANCE, min_length=1, max_length=200)


class ClaimBody(HeartbeatBody):
    """Claim a task for this instance, waiting up to ``wait_s`` (capped by HOOKGATE_RUNTIME_CLAIM_MAX_WAIT_S)."""

    wait_s: float = Field(default=0, ge=0, le=CLAIM_WAIT_CEILING_S, strict=True,
                          description="Seconds to wait for a task (0: answer at once); the gateway waits at most "
                                      "HOOKGATE_RUNTIME_CLAIM_MAX_WAIT_S")


class RenewBody(BaseModel):
    """The lease token the claim (or the push) handed out."""

    lease_token: UUID


def _as_text(value: Any) -> Any:
    """An ``error`` that is not text (an object, a number) is kept as its text rather than refused."""
    return value if value is None or isinstance(value, str) else str(value)


class ReportBody(RenewBody):
    """The holder's final report; a failure with retry_class ``transient`` or ``retryable`` is tried again."""

    status: Literal["succeeded", "failed"]
    result: Any = None
    error: Annotated[str | None, BeforeValidator(_as_text)] = None
    retry_class: str | None = None


class Heartbeat(BaseModel):
    """The instance is online until ``heartbeat_timeout_s`` passes without a heartbeat or claim."""

    agent_id: UUID
    instance: str
    status: str
    heartbeat_timeout_s: float


class TaskAutopilot(BaseModel):
    """The rule the task carries out."""

    id: UUID | None
    title: str | None
    instructions: str | None


class ClaimedTask(BaseModel):
    """A task: its run, its attempt (1 first), the run's payload and its autopilot."""

    id: UUID
    run_id: UUID | None
    attempt: int
    payload: Any
    autopilot: TaskAutopilot


class Claim(BaseModel):
    """A claimed task and its lease: renew before ``lease_expires_at``, report with the lease token."""

    task: ClaimedTask
    lease_token: UUID
    lease_expires_at: datetime


class Renewed(BaseModel):
    """The lease now ends at ``lease_expires_at``."""

    task_id: UUID
    lease_expires_at: datetime


class Reported(BaseModel):
    """The task's status after the report; ``applied`` is false for a repeat of the same report."""

    task_id: UUID
    status: str
    applied: bool


def _ctx(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


async def _read(request: Request) -> bytes:
    """The body, read only now that the caller is known, within the API body cap."""
    return await bodies.read_body(request, _ctx(request).settings.api_max_body_bytes)


Body = TypeVar("Body", bound=BaseModel)


def _body(raw: bytes, model: type[Body]) -> Body:
    """The body as ``model``: 400 ``invalid_body`` unless a storable JSON object, 422 for a refused field."""
    found = validated(model, _object(raw))
    assert isinstance(found, model)
    return found


def _object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        # NaN/Infinity: not JSON, and jsonb refuses them.
        body = jsontext.loads(raw, parse_constant=jsontext.refuse_constant)
    except jsontext.TooDeep:
        raise ApiError(400, "invalid_body", f"the JSON is nested deeper than {jsontext.MAX_DEPTH} levels") from None
    except ValueError:  # UnicodeDecodeError and NaN/Infinity included
        raise ApiError(400, "invalid_body", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_body", "the body must be a JSON object")
    if (why := jsontext.unstorable(raw, body)) is not None:  # NUL or a lone surrogate: no database text holds them
        raise ApiError(400, "invalid_body", why)
    return body


def _bearer(request: Request, debtor: debt.Debtor) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise debtor.refuse(ApiError(401, "unauthorized", "expected 'Authorization: Bearer hgr_…'"))
    return token.strip()


def _no_token() -> ApiError:
    return ApiError(401, "unauthorized", "a valid runtime token is required")


async def _runtime_agent(request: Request) -> asyncpg.Record:
    """The pull agent of the request's bearer token (401 otherwise); the connection is not kept."""
    debtor = debt.admitted(request)  # 429 while in debt, before any lookup
    token = _bearer(request, debtor)
    async with _ctx(request).pool.acquire() as conn:
        return await _agent_for(conn, token, debtor)


async def _agent_for(conn: Conn, token: str | None, debtor: debt.Debtor) -> asyncpg.Record:
    if token is None or not crypto.token_shape_ok(token, agents.RUNTIME_TOKEN_PREFIX):
        raise debtor.refuse(_no_token())
    agent = await conn.fetchrow(Q.agent_get_by_runtime_token, crypto.digest(token))
    if agent is None:
        raise debtor.refuse(_no_token())
    return agent


def _task_id(request: Request) -> UUID:
    try:
        return UUID(request.path_params["task_id"])
    except ValueError:
        raise ApiError(404, "not_found", "no such task") from None


async def heartbeat(request: Request) -> Response:
    """``POST /v1/runtime/heartbeat``: this instance is alive (online for ``heartbeat_timeout_s``)."""
    agent = await _runtime_agent(request)
    body, ctx = _body(await _read(request), HeartbeatBody), _ctx(request)
    async with ctx.pool.acquire() as conn:
        row = await conn.fetchrow(Q.instance_heartbeat, agent["id"], body.instance)
    assert row is not None
    return _json(Heartbeat(agent_id=agent["id"], instance=body.instance, status=row["status"],
                           heartbeat_timeout_s=ctx.settings.heartbeat_timeout_s))


async def claim(request: Request) -> Response:
    """``POST /v1/runtime/claim``: the next task with its lease, waiting up to ``wait_s``; 204 when none."""
    agent = await _runtime_agent(request)
    body, ctx = _body(await _read(request), ClaimBody), _ctx(request)
    wait, instance = min(body.wait_s, ctx.settings.runtime_claim_max_wait_s), body.instance
    async with ctx.pool.acquire() as conn:
        await conn.execute(Q.instance_heartbeat, agent["id"], instance)

    async def attempt() -> tasks.Claimed | None:
        async with ctx.pool.acquire() as conn:
            won = await tasks.claim(conn, agent_id=agent["id"], lease_s=ctx.settings.task_lease_s,
                                    holder=instance, actor_type="runtime", cap=ctx.settings.agent_max_concurrency)
        return won[0] if won else None

    async def undo(won: tasks.Claimed) -> None:
        async with ctx.pool.acquire() as conn:
            if await tasks.release(conn, won.id, won.lease_token, holder=str(agent["id"]), actor_type="runtime",
                                   reason="client_gone", unclaimed=True):
                await conn.execute(Q.notify_send, notify.TASKS, str(won.id))

    if wait <= 0:
        found = await attempt()
    else:
        found = await _wait_for_task(request, agent["id"], attempt, undo, wait)
    return Response(status_code=204) if found is None else _json(_claim_body(found))


async def _wait_for_task(
    request: Request, agent_id: UUID, attempt: Callable[[], Awaitable[tasks.Claimed | None]],
    undo: Callable[[tasks.Claimed], Awaitable[None]], wait: float,
) -> tasks.Claimed | None:
    """Long-poll in the process's claim waits, ending early when the client hangs up."""
    gone = asyncio.Event()
    watcher = asyncio.ensure_future(_watch_disconnect(request, gone))
    try:
        found: tasks.Claimed | None = await claim_waits(request).claim(
            agent_id, attempt, undo, timeout=wait, gone=gone)
        return found
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _watch_disconnect(request: Request, gone: asyncio.Event) -> None:
    """The body is read, so the next ASGI message is the client's hang-up: set ``gone`` then."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()


def claim_waits(request: Request) -> ClaimWaits:
    """The app's claim waits (see :func:`gateway.app.create_app`)."""
    waits: ClaimWaits = request.app.state.claim_waits
    return waits


def _claim_body(won: tasks.Claimed) -> Claim:
    autopilot = TaskAutopilot(id=won.autopilot_id, title=won.autopilot_title,
                              instructions=won.autopilot_instructions)
    task = ClaimedTask(id=won.id, run_id=won.run_id, attempt=won.attempt, payload=won.payload, autopilot=autopilot)
    return Claim(task=task, lease_token=won.lease_token, lease_expires_at=won.lease_expires_at)


def _json(answer: BaseModel) -> JSONResponse:
    return JSONResponse(answer.model_dump(mode="json"))


@dataclass(frozen=True)
class Caller:
    """Who touches a task: its pull agent (bearer), or, without a bearer, whoever holds an HTTP task's lease."""

    actor_type: str
    actor_id: str
    debtor: debt.Debtor | None = None
    """A caller without a runtime token: its refusals add to its address's bad-credential debt."""

    def sent(self, raw: bytes) -> tasks.Sent | None:
        """What a refusal of this caller keeps of its body: its size and digest, if it proved nothing."""
        return None if self.debtor is None else tasks.Sent.of(raw)


async def _authorize(request: Request, task_id: UUID) -> Caller:
    """Who may touch this task, from the path and the bearer alone (the body is not read yet)."""
    debtor = debt.admitted(request)  # 429 while in debt, before any lookup
    token = _bearer(request, debtor)
    if token is None:
        return await _anonymous(request, task_id, debtor)
    async with _ctx(request).pool.acquire() as conn:
        agent = await _agent_for(conn, token, debtor)
        state = await conn.fetchrow(Q.task_state, task_id)
    if state is None or state["agent_id"] != agent["id"]:
        raise ApiError(404, "not_found", "no such task")
    return Caller("runtime", str(agent["id"]))


async def _anonymous(request: Request, task_id: UUID, debtor: debt.Debtor) -> Caller:
    """A caller without a runtime token: only an HTTP agent's task (else 401, charged to its address)."""
    async with _ctx(request).pool.acquire() as conn:
        state = await conn.fetchrow(Q.task_state, task_id)
    if state is None or state["runtime_kind"] != "http":
        raise debtor.refuse(_no_token())
    return Caller("agent", str(state["agent_id"]), debtor)


def _cancelled() -> ApiError:
    """The caller's lease held the task when it was cancelled: it proved its token, so no debt is charged."""
    return ApiError(409, "cancelled", "the task was cancelled; stop working on it")


def _lease_lost(caller: Caller) -> ApiError:
    error = ApiError(409, "lease_lost", "this lease token no longer holds the task")
    return error if caller.debtor is None else caller.debtor.refuse(error)


async def renew(request: Request) -> Response:
    """``POST /v1/runtime/tasks/{id}/renew`` ``{"lease_token"}``: extend the lease by ``task_lease_s``."""
    task_id, ctx = _task_id(request), _ctx(request)
    caller = await _authorize(request, task_id)
    raw = await _read(request)
    token = _body(raw, RenewBody).lease_token
    async with ctx.pool.acquire() as conn:
        try:
            expires = await tasks.renew(conn, task_id, token, lease_s=ctx.settings.task_lease_s,
                                        actor_type=caller.actor_type, actor_id=caller.actor_id,
                                        sent=caller.sent(raw))
        except TaskCancelled:
            raise _cancelled() from None
        except LeaseLost:
            raise _lease_lost(caller) from None
    return _json(Renewed(task_id=task_id, lease_expires_at=expires))


async def report(request: Request) -> Response:
    """``POST /v1/runtime/tasks/{id}/report``: the holder's final report; 409 for a stale token."""
    task_id, ctx = _task_id(request), _ctx(request)
    caller = await _authorize(request, task_id)
    raw = await _read(request)
    body = _body(raw, ReportBody)
    token, rep = body.lease_token, tasks.Report(body.status, body.result, body.error, body.retry_class)
    async with ctx.pool.acquire() as conn:
        if rep.status == "failed" and rep.retry_class in tasks.RETRYABLE_CLASSES:
            delay = await tasks.retry_delay(conn, task_id, ctx.settings.retry_schedule)
            rep = replace(rep, retry_after_s=delay)
        try:
            outcome = await tasks.report(conn, task_id, token, rep, actor_type=caller.actor_type,
                                         actor_id=caller.actor_id, sent=caller.sent(raw))
        except TaskCancelled:
            raise _cancelled() from None
        except LeaseLost:
            raise _lease_lost(caller) from None
        if outcome == "applied":
            # The report freed one of the agent's concurrency slots (and a retry requeued the task): a runtime
            # of the agent waiting in a claim may now win one. After the commit, never inside it.
            await conn.execute(Q.notify_send, notify.TASKS, str(task_id))
        state = await conn.fetchrow(Q.task_state, task_id)
    assert state is not None
    return _json(Reported(task_id=task_id, status=state["status"], applied=outcome == "applied"))


# Retried whole on a deadlock or serialization failure: each writes in one transaction at most, and its
# other statements (heartbeat, the notify, reads) are safe to repeat.
routes = [
    Route("/v1/runtime/heartbeat", overload.retried(heartbeat), methods=["POST"]),
    Route("/v1/runtime/claim", overload.retried(claim), methods=["POST"]),
    Route("/v1/runtime/tasks/{task_id}/renew", overload.retried(renew), methods=["POST"]),
    Route("/v1/runtime/tasks/{task_id}/report", overload.retried(report), methods=["POST"]),
]

Security = tuple[dict[str, list[str]], ...]
_TOKEN: Security = ({"runtimeToken": []},)
_TOKEN_OR_LEASE: Security = ({"runtimeToken": []}, {})  # no bearer: an HTTP agent's task; its lease token proves it
_TASK_ID = {"name": "task_id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"},
            "description": "The task's id (`task.id` of the claim, `task_id` of a push); any other value is 404"}
_COMMON = {
    400: Answer("The body is not a JSON object, is nested too deep or holds text a database cannot store", (Error,)),
    401: Answer("No valid runtime token (`unauthorized`)", (Error,)),
    413: Answer("The body is larger than HOOKGATE_API_MAX_BODY_BYTES (`payload_too_large`)", (Error,)),
    422: Answer("A field has the wrong type or value (`invalid_request`)", (Error,)),
    429: Answer("Too many bad credentials from this address (`rate_limited`): bad runtime tokens, or bad lease "
                "tokens sent without one, or bad keys or webhook tokens; retry after Retry-After",
                (Error,), retry_after=True),
    503: Answer("The database is unavailable or busy (`unavailable`, `busy`); retry after Retry-After",
                (Error,), retry_after=True),
}
_ON_TASK = {
    **_COMMON,
    401: Answer("No valid runtime token; without one, the task is not an HTTP agent's (`unauthorized`)", (Error,)),
    404: Answer("No such task, or it is another agent's (`not_found`)", (Error,)),
    409: Answer("The lease token no longer holds the task (`lease_lost`), or the task was cancelled while it "
                "held it (`cancelled`: stop working on it); nothing changed", (Error,)),
}
OPERATIONS = [
    Operation("POST", "/v1/runtime/heartbeat", "runtime_heartbeat", "Say this runtime instance is alive", "runtime",
              {200: Answer("The instance is online", (Heartbeat,)), **_COMMON}, _TOKEN,
              {"application/json": HeartbeatBody}, description=(heartbeat.__doc__ or "").strip()),
    Operation("POST", "/v1/runtime/claim", "runtime_claim", "Claim the next task, long-polling up to wait_s",
              "runtime", {200: Answer("A task and its lease", (Claim,)), 204: Answer("No task within wait_s"),
                          **_COMMON}, _TOKEN, {"application/json": ClaimBody},
              description=(claim.__doc__ or "").strip()),
    Operation("POST", "/v1/runtime/tasks/{task_id}/renew", "runtime_renew", "Extend a task's lease", "runtime",
              {200: Answer("The lease is extended", (Renewed,)), **_ON_TASK}, _TOKEN_OR_LEASE,
              {"application/json": RenewBody}, (_TASK_ID,), (renew.__doc__ or "").strip()),
    Operation("POST", "/v1/runtime/tasks/{task_id}/report", "runtime_report", "Report a task's outcome", "runtime",
              {200: Answer("The report is recorded (or was already)", (Reported,)), **_ON_TASK}, _TOKEN_OR_LEASE,
              {"application/json": ReportBody}, (_TASK_ID,), (report.__doc__ or "").strip()),
]
"""The runtime API in ``/openapi.json``: bodies and answers are the models the handlers answer with."""
