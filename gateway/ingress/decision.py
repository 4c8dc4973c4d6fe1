"""Ingress steps 6 and 8-10 as decisions without I/O: verify a request, then decide what it becomes.

A request that passed the token, size and body steps becomes exactly one of:

- ``rejected`` (bad, missing or expired signature): a row that holds no dedupe key, debt, 401; or, for an event
  that would be accepted while its workspace is at ``HOOKGATE_WORKSPACE_MAX_QUEUED`` waiting runs
  (:mod:`gateway.ingress.quota`), ``workspace_queue_full``: a row that holds no dedupe key (the provider's retry
  is a new delivery), no debt, 429 with ``Retry-After``;
- ``ignored`` (step 9, :func:`autopilot.admission.why_ignored`: the event and payload filters among others): a
  row, 200 (a payload filter's deciding node is stored in words, never answered);
- ``accepted``: a ``queued`` delivery and its ``pending`` run, admitted through the gate of
  :mod:`autopilot.admission` over the facts read with the token; the delivery worker dispatches the run;
- ``skipped``: the gate said no: the run is inserted ``skipped`` with its reason, and the delivery is
  ``dispatched`` at once (its run is final: there is nothing left for a worker to do).

(The fifth outcome, ``duplicate``, is found by the write itself: see :mod:`gateway.ingress.persist`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from autopilot import admission
from gateway.envelope import Payload, build_envelope
from gateway.ingress.triggers import Trigger
from gateway.providers import Inbound, selected_headers

REJECTED = {"invalid": "invalid_signature", "missing": "missing_signature", "expired": "expired_timestamp"}
"""Signature status → the rejected delivery's reason code (step 8)."""
REJECTED_TEXT = {
    "invalid_signature": "the signature does not match",
    "missing_signature": "the signature is missing",
    "expired_timestamp": "the signed timestamp is outside the tolerance",
    "workspace_queue_full": "the workspace has too many runs waiting; retry later",
}
QUEUE_FULL = "workspace_queue_full"
RETRY_AFTER_QUEUE_FULL_S = 30
"""What a refused provider is told to wait: runs drain at the agents' pace, not in a second."""


@dataclass(frozen=True)
class Received:
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
    signature_detail: str | None = None
    """For a rejected signature of a scheme given as data, which part failed in words (stored, never answered)."""
    payload_text: str | None = None
    """The body's JSON text when it denotes the payload exactly (:func:`gateway.envelope.parse_body_with_text`)."""


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
    detail: str | None = None
    """Stored in place of the reason code's usual text when set (which part of a signature scheme failed, which
    node of a payload filter did not match)."""

    @property
    def reason(self) -> str | None:
        """The text stored with the delivery's reason code."""
        code = self.reason_code
        return None if code is None else self.detail or REJECTED_TEXT.get(code) or admission.REASONS.get(code)


def verify(trigger: Trigger, inbound: Inbound, payload: Payload, payload_text: str | None = None) -> Received:
    """Step 6 (and the envelope of step 5): event, dedupe key, signature, selected headers.

    ``payload_text``: the body's JSON text if it denotes ``payload`` exactly, stored in its place.
    """
    preset = trigger.preset
    event = preset.event(inbound)
    key, source = preset.dedupe_key(inbound)
    received_at = datetime.fromtimestamp(inbound.now, UTC)
    content_type = inbound.headers.get("content-type")
    signature = preset.verify(inbound, trigger.secrets)
    detail = None
    if signature in REJECTED and preset.explain is not None:  # the cold path: a refused request only
        detail = preset.explain(inbound, [secret for secret in trigger.secrets if secret])
    return Received(
        received_at=received_at, raw=inbound.raw, content_type=content_type,
        headers=selected_headers(preset, inbound.headers), event=event, dedupe_key=key, dedupe_source=source,
        envelope=build_envelope(event, payload, received_at, content_type), signature=signature,
        signature_detail=detail, payload_text=payload_text,
    )


def decide(trigger: Trigger, received: Received, *, queue_full: bool = False) -> Plan:
    """Steps 8-10 as a decision over the facts read with the token (no I/O).

    ``queue_full``: the trigger's workspace is at its limit of waiting runs, so an event that would make a
    pending run is refused (429); one that is ignored or skipped makes none and is recorded as usual.
    """
    if received.signature in REJECTED:
        code = REJECTED[received.signature]
        body = {"status": "rejected", "reason": code, "error": code, "message": REJECTED_TEXT[code]}
        return Plan("rejected", code, 401, body, detail=received.signature_detail)
    ignored = admission.why_ignored(trigger.facts, received.event, received.envelope["payload"])
    if ignored is not None:
        return Plan("ignored", ignored.code, 200, {"status": "ignored", "reason": ignored.code}, detail=ignored.reason)
    plan = admitted(trigger)
    if queue_full and plan.run_status == "pending":
        body = {"status": "rejected", "reason": QUEUE_FULL, "error": QUEUE_FULL, "message": REJECTED_TEXT[QUEUE_FULL]}
        return Plan("rejected", QUEUE_FULL, 429, body)
    return plan


def admitted(trigger: Trigger) -> Plan:
    """Step 10 through the admission gate: a pending run, or a skipped one with its reason.

    One plan per trigger lookup (the gate is pure over the facts read with it), so the requests of a batch that
    share it share its fields in the ingest statement (:mod:`gateway.ingress.batch`).
    """
    plan: Plan | None = trigger.memo.get("admitted")
    if plan is None:
        plan = trigger.memo["admitted"] = _admitted(trigger)
    return plan


def _admitted(trigger: Trigger) -> Plan:
    d = admission.Decision.of(trigger.facts, "webhook")
    if d.reason_code is None:
        body = {"status": "accepted", "autopilot_id": str(trigger.autopilot_id), "trigger_id": str(trigger.id)}
        return Plan("queued", None, 200, body, "pending", d.rule_version_id, d.accountable_id)
    return Plan("dispatched", d.reason_code, 200, {"status": "skipped", "reason": d.reason_code}, "skipped",
                d.rule_version_id, d.accountable_id, d.reason_code, d.reason)


def left_for_worker(trigger: Trigger) -> Plan:
    """The crash-window state: the delivery alone, queued, for the worker to admit."""
    body = {"status": "accepted", "run_id": None, "autopilot_id": str(trigger.autopilot_id),
            "trigger_id": str(trigger.id)}
    return Plan("queued", None, 200, body)
