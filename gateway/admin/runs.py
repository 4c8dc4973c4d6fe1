"""Runs: start one by hand or from a script, list, read with its causal chain, cancel, retry.

``POST /v1/autopilots/{id}/runs`` goes through the admission gate like every other source (ARCHITECTURE §6):
``manual`` runs record the caller as originator and accountable member (checked live, in the same
transaction); ``api`` runs have no originator and are accountable to the rule's publisher. A run that
cannot proceed is still created, ``skipped`` with its reason. A pending run wakes the workers
(``hookgate_runs``), which create its issue or task. ``Idempotency-Key`` makes a retried POST safe.

Cancel ends the run and its unfinished tasks, running ones included: their holder is told (a push in
flight is aborted, a pull runtime's next renew or report gets 409 ``cancelled``). Retry gives a failed or
cancelled run one more task (``autopilot.reruns``) and queues it again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from autopilot import admission, audit, lifecycle, reruns
from gateway.admin import auth, pagination
from gateway.admin.attempts import AttemptOut, attempt_out
from gateway.admin.openapi import Call, Endpoints, Reply
from gateway.admin.pagination import Page, PageQuery
from gateway.errors import ApiError
from hookgate import notify
from hookgate.database import one
from sql import Q

api = Endpoints("Runs")
Source = Literal["manual", "schedule", "webhook", "api"]
RunStatus = Literal["pending", "issue_created", "queued", "running", "completed", "failed", "cancelled", "skipped"]


class RunIn(BaseModel):
    """Start a run: an optional JSON payload; ``manual`` (default: you are accountable) or ``api``."""

    model_config = ConfigDict(extra="forbid")
    payload: dict[str, Any] | None = None
    source: Literal["manual", "api"] = "manual"


class RunCreated(BaseModel):
    """The admitted run (``skipped`` with a reason when the gate refused it)."""

    run_id: UUID
    status: RunStatus
    reason_code: str | None
    reason: str | None
    source: Literal["manual", "api"]
    autopilot_id: UUID
    originator_id: UUID | None
    accountable_id: UUID | None
    rule_version_id: UUID | None


class RunOut(BaseModel):
    """A run, its attribution and what it made."""

    id: UUID
    autopilot_id: UUID
    trigger_id: UUID | None
    delivery_id: UUID | None
    source: Source
    status: RunStatus
    planned_at: datetime | None
    rule_version_id: UUID | None
    issue_id: UUID | None
    task_id: UUID | None
    originator_id: UUID | None
    accountable_id: UUID | None
    reason_code: str | None
    reason: str | None
    #: When the run's work is tried next: while its task waits to be retried (the run is ``queued``), or
    #: while a pending webhook run's delivery is held back by the trigger's pacing (``reason_code = paced``).
    next_attempt_at: datetime | None = None
    #: Its task's attempts so far (0 before the first), and the last attempt's error.
    attempt: int = 0
    last_error: str | None = None
    #: Which of the run's tasks its task is: 1 for the first dispatch, n + 1 after n retries (a retry's ``attempt``);
    #: 0 before it has one.
    run_attempt: int = 0
    #: What its queued task waits for when it is not its own next attempt, in words (see :func:`agent_wait`).
    waiting: str | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class Link(BaseModel):
    """One step of a run's chain: its id, status and (if any) why it stopped."""

    id: UUID
    status: str
    reason_code: str | None = None
    reason: str | None = None


class Chain(BaseModel):
    """delivery → run → issue → task, each with its status (null where the step does not exist)."""

    delivery: Link | None
    run: Link
    issue: Link | None
    task: Link | None


class RunDetail(RunOut):
    """A run with its payload, causal chain and its task's latest attempt."""

    payload: dict[str, Any]
    chain: Chain
    latest_attempt: AttemptOut | None = None


class RunPage(Page[RunOut]):
    """A page of runs, newest first."""


class RunQuery(PageQuery):
    """Filter runs."""

    autopilot_id: UUID | None = None
    status: RunStatus | None = None
    source: Source | None = None


class CancelIn(BaseModel):
    """Why the run is cancelled (optional)."""

    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=1000)


PACED_REASON = "its delivery is held back by the trigger's rate_limit_per_minute until next_attempt_at"


def paced_until(row: asyncpg.Record) -> datetime | None:
    """When a pending run's delivery, held back by its trigger's pacing, is tried next; None if it is not held.

    Read from the delivery (queries that join it: run_list, run_chain), so pacing writes nothing to the run.
    """
    if row["status"] != "pending" or row.get("delivery_status") != "queued":
        return None
    if row.get("delivery_reason_code") != "paced":
        return None
    at: datetime | None = row.get("delivery_available_at")
    return at


class Retried(BaseModel):
    """The run's new task; ``attempt`` is the run's task count, this one included (1 was the first dispatch)."""

    run_id: UUID
    task_id: UUID
    attempt: int


def agent_wait(status: str | None, available_at: datetime | None, next_probe_at: datetime | None) -> dict[str, Any]:
    """A queued task held by its agent's open circuit: its next attempt is the agent's next probe, said in words.

    ``next_probe_at`` is what the queries read as ``agent_next_probe_at``: set only while the task is queued and
    its agent unhealthy, and never before now (a due probe is taken by the next push pass). Otherwise nothing.
    """
    if status != "queued" or next_probe_at is None:
        return {}
    probe = next_probe_at.isoformat().replace("+00:00", "Z")
    return {"next_attempt_at": max(next_probe_at, available_at or next_probe_at),
            "waiting": f"waiting for the agent to recover (next probe {probe})"}


def run_out(row: asyncpg.Record) -> RunOut:
    """Render a run row with its task's attempt; a run held back by pacing shows ``reason_code = paced``."""
    out = dict(row) | {"delivery_id": row["webhook_delivery_id"], "attempt": row.get("task_attempt") or 0,
                       "last_error": row.get("task_error"), "run_attempt": row.get("run_attempt") or 0}
    if row.get("task_status") == "queued" and out["attempt"] > 0:  # waiting for a retry
        out["next_attempt_at"] = row["task_available_at"]
    out |= agent_wait(row.get("task_status"), row.get("task_available_at"), row.get("agent_next_probe_at"))
    paced = paced_until(row)
    if paced is not None and row["reason_code"] is None:
        out |= {"reason_code": "paced", "reason": PACED_REASON, "next_attempt_at": paced}
    return RunOut.model_validate(out)


def _chain(row: asyncpg.Record) -> Chain:
    delivery = issue = task = None
    if row["webhook_delivery_id"] is not None and row["delivery_status"] is not None:
        delivery = Link(id=row["webhook_delivery_id"], status=row["delivery_status"],
                        reason_code=row["delivery_reason_code"])
    if row["issue_id"] is not None and row["issue_status"] is not None:
        issue = Link(id=row["issue_id"], status=row["issue_status"])
    if row["task_id"] is not None and row["task_status"] is not None:
        task = Link(id=row["task_id"], status=row["task_status"], reason=row["task_error"])
    run = Link(id=row["id"], status=row["status"], reason_code=row["reason_code"], reason=row["reason"])
    return Chain(delivery=delivery, run=run, issue=issue, task=task)


def _envelope(source: str, payload: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
    """The same envelope shape ingress builds, so agents see one format whatever the source."""
    return {"event": f"autopilot.{source}", "payload": payload or {},
            "request": {"received_at": now.isoformat().replace("+00:00", "Z"), "content_type": "application/json"}}


@api.add("POST", "/v1/autopilots/{autopilot_id}/runs", summary="Start a run", response=RunCreated, status=201,
         body=RunIn, idempotent=True)
async def create_run(call: Call) -> Reply:
    """Writers only. Admitted through the gate; a pending run wakes the workers. Honours Idempotency-Key."""
    autopilot = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
    await auth.require_writer(call.conn, call.principal, autopilot)
    return await call.once(lambda: _start_run(call, autopilot))


async def _start_run(call: Call, autopilot: asyncpg.Record) -> RunCreated:
    body: RunIn = call.body
    clicker = call.principal.member_id if body.source == "manual" else None
    async with call.conn.transaction():
        now = await call.conn.fetchval(Q.server_now, None)
        admitted = await admission.admit(call.conn, autopilot_id=autopilot["id"], source=body.source,
                                         payload=_envelope(body.source, body.payload, now), clicker_id=clicker,
                                         heartbeat_timeout_s=call.ctx.settings.heartbeat_timeout_s)
        if admitted.status == "pending":
            await call.conn.execute(Q.notify_send, notify.RUNS, str(admitted.run_id))
        row = one(await call.conn.fetchrow(Q.run_get, call.principal.workspace_id, admitted.run_id))
    return RunCreated(run_id=row["id"], status=row["status"], reason_code=row["reason_code"], reason=row["reason"],
                      source=body.source, autopilot_id=row["autopilot_id"], originator_id=row["originator_id"],
                      accountable_id=row["accountable_id"], rule_version_id=row["rule_version_id"])


@api.add("GET", "/v1/runs", summary="List runs", response=RunPage, query=RunQuery)
async def list_runs(call: Call) -> dict[str, Any]:
    """Runs of the workspace, newest first, filtered by autopilot, status and source."""
    q: RunQuery = call.query
    return await pagination.fetch(call.conn, Q.run_list, q, run_out,
                                  call.principal.workspace_id, q.autopilot_id, q.status, q.source)


@api.add("GET", "/v1/runs/{run_id}", summary="Get a run", response=RunDetail)
async def get_run(call: Call) -> RunDetail:
    """One run with its payload, its chain (delivery → run → issue → task) and its task's latest attempt.

    The attempt's response headers and body excerpt are shown to writers of the autopilot only.
    """
    row = await call.scoped(Q.run_chain, "run")
    latest = None
    if row["task_id"] is not None and (attempt := await call.conn.fetchrow(Q.attempt_latest, row["task_id"])):
        autopilot = await auth.autopilot_of(call.conn, call.principal, row["autopilot_id"])
        latest = attempt_out(attempt, full=await auth.can_write(call.conn, call.principal, autopilot))
    return RunDetail(**run_out(row).model_dump(), payload=row["payload"] or {}, chain=_chain(row),
                     latest_attempt=latest)


@api.add("POST", "/v1/runs/{run_id}/cancel", summary="Cancel a run", response=RunOut, body=CancelIn)
async def cancel_run(call: Call) -> RunOut:
    """Writers of the run's autopilot. Its queued and running tasks are cancelled too; a holder is told."""
    body: CancelIn = call.body
    run = await call.scoped(Q.run_get, "run")
    autopilot = await auth.autopilot_of(call.conn, call.principal, run["autopilot_id"])
    await auth.require_writer(call.conn, call.principal, autopilot)
    async with call.conn.transaction():
        row = await call.conn.fetchrow(Q.run_cancel, call.principal.workspace_id, run["id"],
                                       body.reason or "cancelled through the admin API")
        if row is None:
            raise ApiError(409, "run_finished", f"the run already ended ({run['status']})")
        tasks = await lifecycle.cancel_tasks(call.conn, run["id"], "run_cancelled", call.principal.workspace_id)
        await audit.record(call.conn, "RUN_CANCEL", actor_type="member", actor_id=call.principal.member_id,
                           subject_type="run", subject_id=run["id"], workspace_id=call.principal.workspace_id,
                           detail={"previous_status": run["status"], "tasks_cancelled": len(tasks)})
    return run_out(row)


@api.add("POST", "/v1/runs/{run_id}/retry", summary="Retry a failed or cancelled run", response=Retried,
         status=202, idempotent=True)
async def retry_run(call: Call) -> Reply:
    """Writers of the run's autopilot. A new task for the same run; the run is queued again. Honours Idempotency-Key.

    409 ``run_not_retryable`` unless the run ended failed or cancelled; 409 ``assignee_missing`` /
    ``agent_archived`` when the autopilot's assignee resolves to no usable agent now; 409
    ``autopilot_archived`` for an archived autopilot.
    """
    run = await call.scoped(Q.run_get, "run")
    autopilot = await auth.autopilot_of(call.conn, call.principal, run["autopilot_id"])
    await auth.require_writer(call.conn, call.principal, autopilot)
    return await call.once(lambda: _retry(call, run["id"], autopilot))


async def _retry(call: Call, run_id: UUID, autopilot: asyncpg.Record) -> Retried:
    settings = call.ctx.settings
    if autopilot["status"] == "archived":
        raise ApiError(409, "autopilot_archived", "the autopilot is archived; its runs cannot be retried")
    try:
        async with call.conn.transaction():
            done = await reruns.retry_run(call.conn, run_id, max_attempts=settings.retry_schedule.attempts,
                                          actor_id=call.principal.member_id,
                                          heartbeat_timeout_s=settings.heartbeat_timeout_s)
    except reruns.RetryRefused as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    return Retried(run_id=done.run_id, task_id=done.task_id, attempt=done.attempt)
