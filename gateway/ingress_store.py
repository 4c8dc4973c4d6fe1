"""Ingress steps 7-12: decide what a verified request becomes, persist it in one statement, answer.

A request that passed the token, size, body and signature steps becomes exactly one of:

- ``rejected`` (bad, missing or expired signature): a row outside the dedupe index, debt, 401;
- ``duplicate`` (a correctly signed request whose dedupe key is held): nothing new, the original's
  ``attempt_count`` + 1 (and ``body_mismatch_count`` + 1 if the raw body differs from the stored one), the
  original woken if still queued, 200 with the original's ids and ``body_matches``;
- ``ignored`` (trigger disabled, autopilot paused or archived, event filtered out): a row, 200;
- ``accepted``: a ``queued`` delivery and its ``pending`` run, admitted through the gate of
  ``autopilot.admission`` (``evaluate``/``accountable`` over the facts read with the token); the delivery
  worker claims the queued delivery and dispatches the run;
- ``skipped``: the gate said no: the run is inserted ``skipped`` with its reason, and the delivery is
  ``dispatched`` at once (its run is final: there is nothing left for a worker to do).

Steps 7-10 are one statement (``delivery_ingest``), hence one atomic commit, and the 2xx is sent only
after it; concurrent requests share that statement and commit (see :mod:`gateway.ingress_batch`);
step 11 (the worker's wake-up) follows the commit (see :mod:`gateway.ingress_wake`).
If admitting the run fails on an internal error (a bug in the gate, a constraint the run violates), the
delivery alone is committed ``queued`` with no run, the same state a crash leaves, and the worker admits
it later; the answer is then ``accepted`` with ``run_id`` null. (A single statement is its own
savepoint: the failed attempt leaves nothing behind.)

Event filters: the trigger's ``event_filters`` is a JSON array of event names or shell-style glob
patterns (``*`` any run of characters, dots included; ``?`` one character; ``[abc]`` a set), matched
case-insensitively against the whole normalised event name (``github.pull_request.*``,
``stripe.invoice.*``). An empty array lets every event through; non-string entries are ignored.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import asyncpg

from autopilot import admission, replays
from gateway import overload
from gateway.ingress_triggers import Trigger
from hookgate import database, metrics
from sql import Q

if TYPE_CHECKING:
    from gateway.ingress_batch import IngestBatcher

log = logging.getLogger("hookgate.ingress")

REJECTED = {"invalid": "invalid_signature", "missing": "missing_signature", "expired": "expired_timestamp"}
_REASON_TEXT = {
    "invalid_signature": "the signature does not match",
    "missing_signature": "the signature is missing",
    "expired_timestamp": "the signed timestamp is outside the tolerance",
    "trigger_disabled": "the trigger is disabled",
    "autopilot_paused": "the autopilot is paused",
    "autopilot_archived": "the autopilot is archived",
    "event_filtered": "the event does not match the trigger's event filters",
}


class Stale(Exception):
    """The trigger changed (or its token rotated) since it was looked up; look up again."""


@dataclass(frozen=True)
class Delivery:
    """A received request, normalised and verified (steps 3-6)."""

    received_at: datetime
    raw: bytes
    content_type: str | None
    headers: dict[str, Any]
    envelope: dict[str, Any]
    event: str
    dedupe_key: str | None
    dedupe_source: str | None
    signature: str


@dataclass(frozen=True)
class Plan:
    """What the delivery becomes: its status and reason, the answer, and the run to admit (if any)."""

    status: str
    reason_code: str | None
    response_status: int
    response: dict[str, Any]
    run_status: str | None = None
    rule_version_id: UUID | None = None
    accountable_id: UUID | None = None
    run_reason_code: str | None = None
    run_reason: str | None = None


@dataclass(frozen=True)
class Answer:
    """The HTTP answer: status code and JSON body; ``charge`` adds bad-credential debt; ``wake`` a queued id."""

    status: int
    body: dict[str, Any]
    charge: bool = False
    wake: str | None = None


def ignored_reason(trigger: Trigger, event: str) -> str | None:
    """Step 9: why this trigger does not take deliveries now, or None."""
    if not trigger.enabled:
        return "trigger_disabled"
    if trigger.autopilot_status in ("paused", "archived"):
        return f"autopilot_{trigger.autopilot_status}"
    if not replays.event_allowed(list(trigger.event_filters), event):  # one matcher for ingress and replay
        return "event_filtered"
    return None


def plan(trigger: Trigger, delivery: Delivery) -> Plan:
    """Steps 8-10 as a decision over the facts read with the token (no I/O)."""
    if delivery.signature in REJECTED:
        code = REJECTED[delivery.signature]
        body = {"status": "rejected", "reason": code, "error": code, "message": _REASON_TEXT[code]}
        return Plan("rejected", code, 401, body)
    ignored = ignored_reason(trigger, delivery.event)
    if ignored is not None:
        return Plan("ignored", ignored, 200, {"status": "ignored", "reason": ignored})
    return admit_plan(trigger)


def admit_plan(trigger: Trigger) -> Plan:
    """Step 10 through the admission gate: a pending run, or a skipped one with its reason."""
    facts = trigger.facts
    code = admission.evaluate(facts, "webhook")
    who = admission.accountable(facts, "webhook")
    if code is None:
        body = {"status": "accepted", "autopilot_id": str(trigger.autopilot_id), "trigger_id": str(trigger.id)}
        return Plan("queued", None, 200, body, "pending", facts["rule_version_id"], who)
    return Plan("dispatched", code, 200, {"status": "skipped", "reason": code}, "skipped",
                facts["rule_version_id"], who, code, admission._SKIP.get(code))


def queued_plan(trigger: Trigger) -> Plan:
    """The crash-window state: the delivery alone, queued, for the worker to admit."""
    body = {"status": "accepted", "run_id": None, "autopilot_id": str(trigger.autopilot_id),
            "trigger_id": str(trigger.id)}
    return Plan("queued", None, 200, body)


def uuid7(unix_s: float) -> UUID:
    """A UUIDv7 (48-bit millisecond time, version 7, RFC 4122 variant, random rest), like hookgate_uuid7()."""
    rand = int.from_bytes(os.urandom(10), "big")
    value = (int(unix_s * 1000) & (1 << 48) - 1) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64
    return UUID(int=value | 0b10 << 62 | rand & (1 << 62) - 1)


def params(trigger: Trigger, d: Delivery, p: Plan) -> tuple[Any, ...]:
    """One request's elements of ``delivery_ingest``'s parameter arrays (new UUIDv7 ids included)."""
    ts = d.received_at.timestamp()  # the database clock (see Trigger.now), so ids sort like received_at
    return (
        trigger.id, trigger.digest, trigger.fingerprint, d.received_at, d.raw, d.content_type,
        d.headers, d.envelope, trigger.provider, d.event, d.dedupe_key, d.dedupe_source, d.signature,
        p.status, p.reason_code, p.response_status, p.response, p.run_status, p.rule_version_id,
        p.accountable_id, p.run_reason_code, p.run_reason, uuid7(ts),
        None if p.run_status is None else uuid7(ts), _REASON_TEXT.get(p.reason_code or "", p.run_reason),
    )


async def _ingest_retrying(writer: IngestBatcher, trigger: Trigger, d: Delivery, p: Plan) -> asyncpg.Record:
    """``_ingest``, again when its statement lost a deadlock or serialization conflict (it then wrote nothing).

    Ingress retries rather than answering 503 at once: not every provider retries a failed delivery.
    """
    return await database.retrying(lambda: _ingest(writer, trigger, d, p), attempts=overload.CONFLICT_ATTEMPTS,
                                   pause_s=overload.CONFLICT_PAUSE_S)


async def _ingest(writer: IngestBatcher, trigger: Trigger, d: Delivery, p: Plan) -> asyncpg.Record:
    row = await writer.ingest(params(trigger, d, p))
    if not row["live"]:
        raise Stale
    return row


def _answer(p: Plan, delivery_id: UUID, run_id: UUID | None) -> Answer:
    body: dict[str, Any] = {"status": p.response["status"], "delivery_id": str(delivery_id)}
    if p.run_status is not None or "run_id" in p.response:
        body["run_id"] = None if run_id is None else str(run_id)
    body.update((k, v) for k, v in p.response.items() if k not in body)
    wake = body["delivery_id"] if p.status == "queued" else None
    return Answer(p.response_status, body, charge=p.status == "rejected", wake=wake)


async def _duplicate(writer: IngestBatcher, trigger: Trigger, d: Delivery) -> Answer | None:
    async with writer.connection() as conn:
        row = await conn.fetchrow(Q.delivery_duplicate, trigger.id, d.dedupe_key, d.raw)
    if row is None:
        return None  # the holder vanished (failed) between our insert and this update: insert again
    if row["body_matches"] is False:  # still a 200 duplicate (providers retry), but worth an operator's look
        metrics.INGRESS_BODY_MISMATCH.labels(trigger.provider).inc()
    run_id, delivery_id = row["run_id"], str(row["delivery_id"])
    body = {"status": "duplicate", "delivery_id": delivery_id, "run_id": None if run_id is None else str(run_id),
            "body_matches": row["body_matches"]}
    return Answer(200, body, wake=delivery_id if row["status"] == "queued" else None)


async def store(writer: IngestBatcher, trigger: Trigger, d: Delivery) -> Answer:
    """Steps 7-12 for a verified delivery, written in ``writer``'s next batch (group commit).

    Raises :class:`Stale` if the trigger changed since lookup.
    """
    for _ in range(3):
        try:
            p = plan(trigger, d)
            row = await _ingest_retrying(writer, trigger, d, p)
        except Stale:
            raise
        except Exception as exc:  # the gate's own bugs included: the delivery is kept for the worker
            # A conflict that kept losing is no admission bug: 503 + Retry-After like an outage.
            if database.is_unavailable(exc) or database.is_retryable(exc) or d.signature in REJECTED:
                raise
            log.error("admission failed at ingress; delivery left queued for the worker", exc_info=exc,
                      extra={"trigger_id": str(trigger.id)})
            p = queued_plan(trigger)
            row = await _ingest(writer, trigger, d, p)
        if row["delivery_id"] is not None:
            return _answer(p, row["delivery_id"], row["run_id"])
        duplicate = await _duplicate(writer, trigger, d)
        if duplicate is not None:
            return duplicate
    raise RuntimeError("dedupe key kept flapping between insert and duplicate paths")


_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
_HUGE_NUMBER = re.compile(rb"[0-9](?:[eE][+-]?[0-9]{3}|[0-9]{299})")
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


def _suspect(raw: bytes) -> bool:
    # Substring tests first: one alternation regex over every byte cost ~4x as much (a hot path).
    # %5C: a form field's percent-encoded backslash, which may start a \u0000 escape once decoded.
    if b"\x00" in raw or b"%00" in raw or (b"\\u" in raw and _ESCAPE.search(raw) is not None):
        return True
    if b"%5C" in raw or b"%5c" in raw:
        return True
    return _HUGE_NUMBER.search(raw) is not None


def unstorable(raw: bytes, payload: object) -> str | None:
    """Why PostgreSQL's jsonb cannot hold this payload (NUL, lone surrogate, infinite number), or None."""
    if not _suspect(raw):
        return None  # the common case costs a few scans of the raw bytes
    return _walk(payload)


def _walk(payload: object) -> str | None:
    """The first unstorable value in ``payload``, visited with an explicit stack (never recursion)."""
    pending = [payload]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if _BAD_CHAR.search(value):
                return "text contains a NUL character or a lone surrogate"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return "a number is too large to store"
        elif isinstance(value, dict):
            pending += value.keys()
            pending += value.values()
        elif isinstance(value, list):
            pending += value
    return None
