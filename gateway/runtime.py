"""The runtime API for pull agents (ARCHITECTURE §7, §11): heartbeat, claim (long-poll), renew, report.

Pull runtimes authenticate with their ``hgr_`` bearer token (looked up by digest). Renew and report are
also how an HTTP agent that answered a push with 202 finishes its task: it has no ``hgr_`` token, so for a
task of an HTTP agent the request may carry no bearer and the lease token in the body is the capability
(a random UUID given only to the current holder, in the push body). A stale or foreign lease token gets
409 ``{"error":"lease_lost"}``, is recorded as LATE_RESULT and changes nothing; the same report repeated
by the holder gets 200 again. The runtime instance is named by the optional ``instance`` body field.

Credentials come before bodies: a runtime token is checked (and, for renew and report, that the task is
the caller's, or an HTTP agent's when no token is sent) before a byte of the body is read; bodies are read
with the ``api_max_body_bytes`` cap (413) and JSON nested too deep is a 400 (:mod:`gateway.bodies`). A
caller without a runtime token proves nothing but the lease token it sends: its refusals (unknown task, or
a wrong lease token, audited with only the size and digest of its body) add to its address's
bad-credential debt (:mod:`gateway.ratelimit`, shared with the ingress), and it gets 429 while in debt.

A claim with ``wait_s`` waits in the process's :class:`gateway.claim_wait.ClaimWaits` (woken by NOTIFY
``hookgate_tasks``, with a poll fallback). A task won for a runtime that hung up meanwhile is handed back
at once, its attempt not counted, so it is not stuck until the lease or the heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from autopilot import agents, tasks
from gateway import bodies, overload, ratelimit
from gateway.claim_wait import ClaimWaits
from gateway.errors import ApiError
from gateway.ingress_store import unstorable
from hookgate import crypto, notify
from hookgate.context import Context
from hookgate.database import Conn
from hookgate.errors import LeaseLost
from sql import Q

DEFAULT_INSTANCE = "default"
_STATUSES = ("succeeded", "failed")


def _ctx(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


async def _read(request: Request) -> bytes:
    """The body, read only now that the caller is known, within the API body cap."""
    return await bodies.read_body(request, _ctx(request).settings.api_max_body_bytes)


def _object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        body = bodies.loads(raw)
    except bodies.TooDeep:
        raise ApiError(400, "invalid_body", f"the JSON is nested deeper than {bodies.MAX_DEPTH} levels") from None
    except ValueError:  # UnicodeDecodeError included
        raise ApiError(400, "invalid_body", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_body", "the body must be a JSON object")
    if (why := unstorable(raw, body)) is not None:  # NUL or a lone surrogate: no database text holds them
        raise ApiError(400, "invalid_body", why)
    return body


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "expected 'Authorization: Bearer hgr_…'")
    return token.strip()


async def _runtime_agent(request: Request) -> asyncpg.Record:
    """The pull agent of the request's bearer token (401 otherwise); the connection is not kept."""
    async with _ctx(request).pool.acquire() as conn:
        return await _agent_for(conn, _bearer(request))


async def _agent_for(conn: Conn, token: str | None) -> asyncpg.Record:
    if token is None or not crypto.token_shape_ok(token, agents.RUNTIME_TOKEN_PREFIX):
        raise ApiError(401, "unauthorized", "a valid runtime token is required")
    agent = await conn.fetchrow(Q.agent_get_by_runtime_token, crypto.digest(token))
    if agent is None:
        raise ApiError(401, "unauthorized", "a valid runtime token is required")
    return agent


def _instance(body: dict[str, Any]) -> str:
    name = body.get("instance", DEFAULT_INSTANCE)
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise ApiError(422, "invalid_request", "instance must be a string of 1-200 characters")
    return name


def _lease_token(body: dict[str, Any]) -> UUID:
    try:
        return UUID(str(body["lease_token"]))
    except (KeyError, ValueError):
        raise ApiError(422, "invalid_request", "lease_token (a UUID) is required") from None


def _task_id(request: Request) -> UUID:
    try:
        return UUID(request.path_params["task_id"])
    except ValueError:
        raise ApiError(404, "not_found", "no such task") from None


async def heartbeat(request: Request) -> Response:
    """``POST /v1/runtime/heartbeat``: this instance is alive (online for ``heartbeat_timeout_s``)."""
    agent = await _runtime_agent(request)
    body, ctx = _object(await _read(request)), _ctx(request)
    async with ctx.pool.acquire() as conn:
        row = await conn.fetchrow(Q.instance_heartbeat, agent["id"], _instance(body))
    assert row is not None
    return JSONResponse({"agent_id": str(agent["id"]), "instance": _instance(body), "status": row["status"],
                         "heartbeat_timeout_s": ctx.settings.heartbeat_timeout_s})


async def claim(request: Request) -> Response:
    """``POST /v1/runtime/claim``: the next task with its lease, waiting up to ``wait_s``; 204 when none."""
    agent = await _runtime_agent(request)
    body, ctx = _object(await _read(request)), _ctx(request)
    wait_s = body.get("wait_s", 0)
    if not isinstance(wait_s, int | float) or isinstance(wait_s, bool) or wait_s < 0:
        raise ApiError(422, "invalid_request", "wait_s must be a non-negative number")
    wait = min(float(wait_s), ctx.settings.runtime_claim_max_wait_s)
    instance = _instance(body)
    async with ctx.pool.acquire() as conn:
        await conn.execute(Q.instance_heartbeat, agent["id"], instance)

    async def attempt() -> tasks.Claimed | None:
        async with ctx.pool.acquire() as conn:
            won = await tasks.claim(conn, agent_id=agent["id"], lease_s=ctx.settings.task_lease_s,
                                    holder=instance, actor_type="runtime")
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
    return Response(status_code=204) if found is None else JSONResponse(_claim_body(found))


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


def _claim_body(won: tasks.Claimed) -> dict[str, Any]:
    autopilot = {"id": None if won.autopilot_id is None else str(won.autopilot_id), "title": won.autopilot_title,
                 "instructions": won.autopilot_instructions}
    return {
        "task": {"id": str(won.id), "run_id": None if won.run_id is None else str(won.run_id),
                 "attempt": won.attempt, "payload": won.payload, "autopilot": autopilot},
        "lease_token": str(won.lease_token), "lease_expires_at": won.lease_expires_at.isoformat(),
    }


@dataclass(frozen=True)
class Caller:
    """Who touches a task: its pull agent (bearer), or, without a bearer, whoever holds an HTTP task's lease."""

    actor_type: str
    actor_id: str
    ip: bytes | None = None
    """The rate key of a caller without a runtime token, whose refusals add to its bad-credential debt."""

    def sent(self, raw: bytes) -> tasks.Sent | None:
        """What a refusal of this caller keeps of its body: its size and digest, if it proved nothing."""
        return None if self.ip is None else tasks.Sent.of(raw)


def _gates(request: Request) -> ratelimit.RateGates:
    from gateway.ingress import ingress_state  # the ingress owns the per-IP gates; the debt is shared

    return ingress_state(request.app).gates


def _client_key(request: Request, gates: ratelimit.RateGates) -> bytes:
    return ratelimit.client_key(request.client.host if request.client else None, request.headers, gates.trusted)


async def _authorize(request: Request, task_id: UUID) -> Caller:
    """Who may touch this task, from the path and the bearer alone (the body is not read yet)."""
    token = _bearer(request)
    if token is None:
        return await _anonymous(request, task_id)
    async with _ctx(request).pool.acquire() as conn:
        agent = await _agent_for(conn, token)
        state = await conn.fetchrow(Q.task_state, task_id)
    if state is None or state["agent_id"] != agent["id"]:
        raise ApiError(404, "not_found", "no such task")
    return Caller("runtime", str(agent["id"]))


async def _anonymous(request: Request, task_id: UUID) -> Caller:
    """A caller without a runtime token: refused while its address is in debt; only an HTTP agent's task."""
    gates = _gates(request)
    ip = _client_key(request, gates)
    if (wait := gates.indebted(ip)) is not None:
        raise ApiError(429, "rate_limited", "too many bad credentials from this address",
                       headers={"Retry-After": str(wait)})
    async with _ctx(request).pool.acquire() as conn:
        state = await conn.fetchrow(Q.task_state, task_id)
    if state is None or state["runtime_kind"] != "http":
        gates.charge(ip)
        raise ApiError(401, "unauthorized", "a valid runtime token is required")
    return Caller("agent", str(state["agent_id"]), ip)


def _lease_lost(request: Request, caller: Caller) -> ApiError:
    if caller.ip is not None:
        _gates(request).charge(caller.ip)
    return ApiError(409, "lease_lost", "this lease token no longer holds the task")


async def renew(request: Request) -> Response:
    """``POST /v1/runtime/tasks/{id}/renew`` ``{"lease_token"}``: extend the lease by ``task_lease_s``."""
    task_id, ctx = _task_id(request), _ctx(request)
    caller = await _authorize(request, task_id)
    raw = await _read(request)
    token = _lease_token(_object(raw))
    async with ctx.pool.acquire() as conn:
        try:
            expires = await tasks.renew(conn, task_id, token, lease_s=ctx.settings.task_lease_s,
                                        actor_type=caller.actor_type, actor_id=caller.actor_id,
                                        sent=caller.sent(raw))
        except LeaseLost:
            raise _lease_lost(request, caller) from None
    return JSONResponse({"task_id": str(task_id), "lease_expires_at": expires.isoformat()})


def _report_of(body: dict[str, Any]) -> tasks.Report:
    status = body.get("status")
    if status not in _STATUSES:
        raise ApiError(422, "invalid_request", "status must be 'succeeded' or 'failed'")
    error, retry_class = body.get("error"), body.get("retry_class")
    if error is not None and not isinstance(error, str):
        error = str(error)
    if retry_class is not None and not isinstance(retry_class, str):
        raise ApiError(422, "invalid_request", "retry_class must be a string")
    return tasks.Report(status, body.get("result"), error, retry_class)


async def report(request: Request) -> Response:
    """``POST /v1/runtime/tasks/{id}/report``: the holder's final report; 409 for a stale token."""
    task_id, ctx = _task_id(request), _ctx(request)
    caller = await _authorize(request, task_id)
    raw = await _read(request)
    body = _object(raw)
    token, rep = _lease_token(body), _report_of(body)
    if rep.status == "failed" and rep.retry_class in tasks.RETRYABLE_CLASSES:
        rep = tasks.Report(rep.status, rep.result, rep.error, rep.retry_class, ctx.settings.task_backoff_base_s)
    async with ctx.pool.acquire() as conn:
        try:
            outcome = await tasks.report(conn, task_id, token, rep, actor_type=caller.actor_type,
                                         actor_id=caller.actor_id, sent=caller.sent(raw))
        except LeaseLost:
            raise _lease_lost(request, caller) from None
        if outcome == "applied":
            # The report freed one of the agent's concurrency slots (and a retry requeued the task): a runtime
            # of the agent waiting in a claim may now win one. After the commit, never inside it.
            await conn.execute(Q.notify_send, notify.TASKS, str(task_id))
        state = await conn.fetchrow(Q.task_state, task_id)
    assert state is not None
    return JSONResponse({"task_id": str(task_id), "status": state["status"], "applied": outcome == "applied"})


# Retried whole on a deadlock or serialization failure: each writes in one transaction at most, and its
# other statements (heartbeat, the notify, reads) are safe to repeat.
routes = [
    Route("/v1/runtime/heartbeat", overload.retried(heartbeat), methods=["POST"]),
    Route("/v1/runtime/claim", overload.retried(claim), methods=["POST"]),
    Route("/v1/runtime/tasks/{task_id}/renew", overload.retried(renew), methods=["POST"]),
    Route("/v1/runtime/tasks/{task_id}/report", overload.retried(report), methods=["POST"]),
]
