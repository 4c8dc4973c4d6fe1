"""Webhook deliveries: list, read (selected headers and body), and replay as new deliveries, one or in bulk.

A replay is a NEW delivery (``replayed_from`` the original, no dedupe key) admitted like a fresh request
(``autopilot.replays``); ``Idempotency-Key`` makes a retried replay return the same new delivery.

A bulk replay (``POST /v1/deliveries/replay``) replays, in one transaction, every delivery a filter selects
(oldest first, up to ``limit``), each exactly as a single replay. The same rule as a single replay decides
who may: the writers of each delivery's autopilot. Naming an autopilot or trigger the caller may not write
is 403; without one, the selection only counts the autopilots the caller may write (owners and admins write
them all). A filter must select something (``filter_required``): a bare limit would replay the workspace's
whole history. Audited once (REPLAY_BULK, with the filter and counts); a dry run changes and audits nothing.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from autopilot import audit, replays
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints, Reply
from gateway.admin.pagination import Page, PageQuery
from gateway.admin.runs import RunStatus
from gateway.errors import ApiError
from sql import Q

api = Endpoints("Deliveries")
MAX_BULK_REPLAY = 10_000
"""The most deliveries one bulk replay may select."""
IDS_SHOWN = 100
"""The most ids a bulk replay answers with."""
DeliveryStatus = Literal["queued", "dispatched", "rejected", "ignored", "failed"]
ReplayableStatus = Literal["queued", "dispatched", "ignored", "failed"]
"""A ``rejected`` delivery (bad signature) is never replayed."""
SignatureStatus = Literal["not_required", "valid", "invalid", "missing", "expired"]


class DeliveryOut(BaseModel):
    """A delivery as listed (no body)."""

    id: UUID
    trigger_id: UUID
    autopilot_id: UUID
    status: DeliveryStatus
    signature_status: SignatureStatus
    provider: str
    event: str
    dedupe_key: str | None
    dedupe_source: str | None
    attempt_count: int
    body_mismatch_count: int
    dispatch_attempts: int
    run_id: UUID | None
    reason_code: str | None
    reason: str | None
    #: When a queued delivery is tried next (after pacing, a retry's backoff or a lease); None once it left the queue.
    next_attempt_at: datetime | None
    response_status: int | None
    content_type: str | None
    received_at: datetime
    replayed_from: UUID | None


class DeliveryDetail(DeliveryOut):
    """A delivery with its selected headers (signature values never stored) and body."""

    headers: dict[str, Any]
    body: str | None
    envelope: Any


class DeliveryPage(Page[DeliveryOut]):
    """A page of deliveries, newest first."""


class DeliveryQuery(PageQuery):
    """Filter deliveries."""

    trigger_id: UUID | None = None
    status: DeliveryStatus | None = None


class ReplayOut(BaseModel):
    """The new delivery made by a replay and its run.

    ``queued`` (a pending run), ``dispatched`` (the gate skipped the run: ``reason_code``), or ``ignored``
    (the trigger no longer takes the event; no run).
    """

    delivery_id: UUID
    run_id: UUID | None
    status: Literal["queued", "dispatched", "ignored"]
    reason_code: str | None
    replayed_from: UUID


class BulkReplayIn(BaseModel):
    """Which deliveries to replay; at least one filter. ``received_after`` is inclusive, ``received_before`` not."""

    model_config = ConfigDict(extra="forbid")
    trigger_id: UUID | None = None
    autopilot_id: UUID | None = None
    status: list[ReplayableStatus] | None = Field(default=None, min_length=1)
    run_status: list[RunStatus] | None = Field(default=None, min_length=1,
                                               description="the status of the delivery's run, e.g. failed")
    event: str | None = Field(default=None, min_length=1, max_length=200, description="exact event name")
    received_after: AwareDatetime | None = None
    received_before: AwareDatetime | None = None
    dry_run: bool = Field(default=False, description="only count and list what would be replayed")
    limit: int = Field(default=1000, ge=1, le=MAX_BULK_REPLAY, description="at most this many, oldest first")

    @model_validator(mode="after")
    def _time_range(self) -> BulkReplayIn:
        if self.received_after and self.received_before and self.received_after >= self.received_before:
            raise ValueError("received_after must be earlier than received_before")
        return self

    def selects(self) -> bool:
        """Whether any filter is set (``dry_run`` and ``limit`` select nothing)."""
        return any(v is not None for v in (self.trigger_id, self.autopilot_id, self.status, self.run_status,
                                           self.event, self.received_after, self.received_before))


class BulkReplayOut(BaseModel):
    """How many deliveries the filter matched and how many were replayed (0 on a dry run).

    ``delivery_ids``: the new deliveries (on a dry run, the matched originals), in the originals' order,
    at most 100.
    """

    matched: int
    replayed: int
    delivery_ids: list[UUID]


def delivery_out(row: asyncpg.Record) -> DeliveryOut:
    """Render a delivery row; a queued one says when it is tried next (``reason_code = paced``: held by pacing)."""
    next_attempt_at = row["available_at"] if row["status"] == "queued" else None
    return DeliveryOut.model_validate(dict(row) | {"replayed_from": row["replayed_from_delivery_id"],
                                                   "next_attempt_at": next_attempt_at})


@api.add("GET", "/v1/deliveries", summary="List deliveries", response=DeliveryPage, query=DeliveryQuery)
async def list_deliveries(call: Call) -> dict[str, Any]:
    """Deliveries of the workspace, newest first, by trigger and status."""
    q: DeliveryQuery = call.query
    return await pagination.fetch(call.conn, Q.delivery_list, q, delivery_out,
                                  call.principal.workspace_id, q.trigger_id, q.status)


async def _delivery(call: Call) -> asyncpg.Record:
    row = await call.conn.fetchrow(Q.delivery_get, call.principal.workspace_id, call.path["delivery_id"])
    return auth.found(row, "delivery")


@api.add("GET", "/v1/deliveries/{delivery_id}", summary="Get a delivery", response=DeliveryDetail)
async def get_delivery(call: Call) -> DeliveryDetail:
    """One delivery with headers and body (decoded as UTF-8, invalid bytes replaced)."""
    row = await _delivery(call)
    body = None if row["body"] is None else bytes(row["body"]).decode("utf-8", errors="replace")
    return DeliveryDetail(**delivery_out(row).model_dump(), headers=row["headers"] or {}, body=body,
                          envelope=row["envelope"])


@api.add("POST", "/v1/deliveries/{delivery_id}/replay", summary="Replay a delivery", response=ReplayOut,
         status=201, idempotent=True)
async def replay_delivery(call: Call) -> Reply:
    """Writers of the autopilot. A new delivery, admitted like ingress (REPLAY audit). Honours Idempotency-Key."""
    original = await _delivery(call)
    autopilot = await auth.autopilot_of(call.conn, call.principal, original["autopilot_id"])
    await auth.require_writer(call.conn, call.principal, autopilot)
    return await call.once(lambda: _replay(call, original))


async def _replay(call: Call, original: asyncpg.Record) -> ReplayOut:
    try:
        made = await replays.replay(call.conn, original, call.principal.member_id,
                                    heartbeat_timeout_s=call.ctx.settings.heartbeat_timeout_s)
    except replays.NotReplayable as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    return ReplayOut(delivery_id=made.delivery_id, run_id=made.run_id, status=made.status,  # type: ignore[arg-type]
                     reason_code=made.reason_code, replayed_from=original["id"])


@api.add("POST", "/v1/deliveries/replay", summary="Replay the deliveries a filter selects", response=BulkReplayOut,
         body=BulkReplayIn, idempotent=True)
async def replay_deliveries(call: Call) -> Reply:
    """Writers of the autopilots. Each selected delivery is replayed like one (REPLAY_BULK audit). Idempotent."""
    body: BulkReplayIn = call.body
    if not body.selects():
        raise ApiError(422, "filter_required", "set at least one of trigger_id, autopilot_id, status, run_status, "
                                               "event, received_after, received_before")
    writer = await _bulk_writer(call, body)
    return await call.once(lambda: _replay_bulk(call, body, writer))


async def _bulk_writer(call: Call, body: BulkReplayIn) -> UUID | None:
    """403 unless the caller writes the autopilot (of the trigger) named; the member to narrow to, or None for all.

    Another workspace's trigger or autopilot is a 404, like an unknown one.
    """
    named = []
    if body.trigger_id is not None:
        trigger = auth.found(await call.conn.fetchrow(Q.trigger_get, call.principal.workspace_id, body.trigger_id),
                             "trigger")
        named.append(trigger["autopilot_id"])
    if body.autopilot_id is not None:
        named.append(body.autopilot_id)
    for autopilot_id in named:
        await auth.require_writer(call.conn, call.principal,
                                  await auth.autopilot_of(call.conn, call.principal, autopilot_id))
    return None if call.principal.is_admin else call.principal.member_id


async def _replay_bulk(call: Call, body: BulkReplayIn, writer: UUID | None) -> BulkReplayOut:
    ws = call.principal.workspace_id
    rows = await call.conn.fetch(Q.delivery_replay_select, ws, body.trigger_id, body.autopilot_id, body.status,
                                 body.event, body.received_after, body.received_before, writer, body.limit,
                                 body.run_status)
    if body.dry_run:
        return BulkReplayOut(matched=len(rows), replayed=0, delivery_ids=[r["id"] for r in rows[:IDS_SHOWN]])
    try:
        made = await replays.replay_many(call.conn, rows, heartbeat_timeout_s=call.ctx.settings.heartbeat_timeout_s)
    except replays.NotReplayable as exc:  # a trigger deleted since the selection: nothing was replayed
        raise ApiError(409, exc.code, str(exc)) from None
    await audit.record(call.conn, "REPLAY_BULK", actor_type="member", actor_id=call.principal.member_id,
                       subject_type="workspace", subject_id=ws, workspace_id=ws,
                       detail={"filter": body.model_dump(mode="json", exclude={"dry_run"}), "matched": len(rows),
                               "replayed": len(made), "statuses": dict(Counter(m.status for m in made))})
    return BulkReplayOut(matched=len(rows), replayed=len(made), delivery_ids=[m.delivery_id for m in made[:IDS_SHOWN]])
