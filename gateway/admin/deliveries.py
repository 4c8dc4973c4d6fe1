"""Webhook deliveries: list, read (selected headers and body), and replay as a new delivery.

A replay is a NEW delivery (``replayed_from`` the original, no dedupe key) admitted like a fresh request
(``autopilot.replays``); ``Idempotency-Key`` makes a retried replay return the same new delivery.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel

from autopilot import replays
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints, Reply
from gateway.admin.pagination import PageQuery
from gateway.errors import ApiError
from sql import Q

api = Endpoints("Deliveries")
DeliveryStatus = Literal["queued", "dispatched", "rejected", "ignored", "failed"]
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


class DeliveryPage(BaseModel):
    """A page of deliveries, newest first."""

    items: list[DeliveryOut]
    next_cursor: str | None


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


def delivery_out(row: asyncpg.Record) -> DeliveryOut:
    """Render a delivery row; a queued one says when it is tried next (``reason_code = paced``: held by pacing)."""
    next_attempt_at = row["available_at"] if row["status"] == "queued" else None
    return DeliveryOut.model_validate(dict(row) | {"replayed_from": row["replayed_from_delivery_id"],
                                                   "next_attempt_at": next_attempt_at})


@api.add("GET", "/v1/deliveries", summary="List deliveries", response=DeliveryPage, query=DeliveryQuery)
async def list_deliveries(call: Call) -> dict[str, Any]:
    """Deliveries of the workspace, newest first, by trigger and status."""
    q: DeliveryQuery = call.query
    rows = await call.conn.fetch(Q.delivery_list, call.principal.workspace_id, q.trigger_id, q.status,
                                 pagination.uuid_after(q), q.limit + 1)
    return pagination.page(rows, q.limit, delivery_out, lambda r: r["id"])


async def _delivery(call: Call) -> asyncpg.Record:
    row = await call.conn.fetchrow(Q.delivery_get, call.principal.workspace_id, call.path["delivery_id"])
    if row is None:
        raise auth.not_found("delivery")
    return row


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
