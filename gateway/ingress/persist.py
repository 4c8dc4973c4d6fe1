"""Ingress steps 7-12: persist a decided delivery in one statement, answer after its commit.

Steps 7-10 are one statement (``delivery_ingest``), hence one atomic commit, and the 2xx is sent only
after it; concurrent requests share that statement and commit (see :mod:`gateway.ingress.batch`);
step 11 (the worker's wake-up) follows the commit (see :mod:`gateway.ingress.notifier`), or is part of it
for a request written alone (see :mod:`gateway.ingress.batch`). What the
delivery becomes is decided before, without I/O (:mod:`gateway.ingress.decision`).

``duplicate`` (a correctly signed request whose dedupe key is held) is found by the write: nothing new,
the original's ``attempt_count`` + 1 (and ``body_mismatch_count`` + 1 if the raw body differs from the
stored one), the original woken if still queued, 200 with the original's ids and ``body_matches``.

If admitting the run fails on an internal error (a bug in the gate, a constraint the run violates), the
delivery alone is committed ``queued`` with no run, the same state a crash leaves, and the worker admits
it later; the answer is then ``accepted`` with ``run_id`` null. (A single statement is its own
savepoint: the failed attempt leaves nothing behind.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from gateway import overload
from gateway.ingress import decision
from gateway.ingress.batch import IngestBatcher, IngestRow
from gateway.ingress.decision import Plan, Received
from gateway.ingress.triggers import Trigger
from hookgate import database, metrics
from sql import Q

log = logging.getLogger("hookgate.ingress")


class Stale(Exception):
    """The trigger changed (or its token rotated) since it was looked up; look up again."""


@dataclass(frozen=True)
class Answer:
    """The HTTP answer: status code and JSON body; ``charge`` adds bad-credential debt; ``wake`` a queued id.

    ``wake`` is None when there is nothing to announce or the write's own commit announced it.
    """

    status: int
    body: dict[str, Any]
    charge: bool = False
    wake: str | None = None


async def _ingest_retrying(writer: IngestBatcher, trigger: Trigger, r: Received, p: Plan) -> asyncpg.Record:
    """``_ingest``, again when its statement lost a deadlock or serialization conflict (it then wrote nothing).

    Ingress retries rather than answering 503 at once: not every provider retries a failed delivery.
    """
    return await database.retrying(lambda: _ingest(writer, trigger, r, p), attempts=overload.CONFLICT_ATTEMPTS,
                                   pause_s=overload.CONFLICT_PAUSE_S)


async def _ingest(writer: IngestBatcher, trigger: Trigger, r: Received, p: Plan) -> asyncpg.Record:
    row = await writer.ingest(IngestRow.of(trigger, r, p))
    if not row["live"]:
        raise Stale
    return row


def _answer(p: Plan, delivery_id: UUID, run_id: UUID | None, woken: bool = False) -> Answer:
    body: dict[str, Any] = {"status": p.response["status"], "delivery_id": str(delivery_id)}
    if p.run_status is not None or "run_id" in p.response:
        body["run_id"] = None if run_id is None else str(run_id)
    body.update((k, v) for k, v in p.response.items() if k not in body)
    wake = body["delivery_id"] if p.status == "queued" and not woken else None  # woken: announced in the commit
    # Bad-credential debt for a bad signature only, not for a refusal of the workspace's queue.
    return Answer(p.response_status, body, charge=p.status == "rejected" and p.response_status == 401, wake=wake)


async def _duplicate(writer: IngestBatcher, trigger: Trigger, r: Received) -> Answer | None:
    async with writer.connection() as conn:
        row = await conn.fetchrow(Q.delivery_duplicate, trigger.id, r.dedupe_key, r.raw)
    if row is None:
        return None  # the holder vanished (failed) between our insert and this update: insert again
    if row["body_matches"] is False:  # still a 200 duplicate (providers retry), but worth an operator's look
        metrics.INGRESS_BODY_MISMATCH.labels(trigger.provider).inc()
    run_id, delivery_id = row["run_id"], str(row["delivery_id"])
    body = {"status": "duplicate", "delivery_id": delivery_id, "run_id": None if run_id is None else str(run_id),
            "body_matches": row["body_matches"]}
    return Answer(200, body, wake=delivery_id if row["status"] == "queued" else None)


async def persist_delivery(writer: IngestBatcher, trigger: Trigger, r: Received, *, queue_full: bool = False) -> Answer:
    """Steps 7-12 for a verified request: its delivery (and run), written in ``writer``'s next batch.

    ``queue_full``: the workspace is at its limit of waiting runs (see :func:`decision.decide`). Raises
    :class:`Stale` if the trigger changed since lookup.
    """
    for _ in range(3):
        p: Plan | None = None
        try:
            p = decision.decide(trigger, r, queue_full=queue_full)
            row = await _ingest_retrying(writer, trigger, r, p)
        except Stale:
            raise
        except Exception as exc:  # the gate's own bugs included: the delivery is kept for the worker
            # A conflict that kept losing is no admission bug: 503 + Retry-After like an outage. A refused
            # event is never kept for the worker (that would answer it 2xx).
            if (database.is_unavailable(exc) or database.is_retryable(exc) or r.signature in decision.REJECTED
                    or (p is not None and p.status == "rejected")):
                raise
            log.error("admission failed at ingress; delivery left queued for the worker", exc_info=exc,
                      extra={"trigger_id": str(trigger.id)})
            p = decision.left_for_worker(trigger)
            row = await _ingest(writer, trigger, r, p)
        if row["delivery_id"] is not None:
            return _answer(p, row["delivery_id"], row["run_id"], bool(row["woken"]))
        duplicate = await _duplicate(writer, trigger, r)
        if duplicate is not None:
            return duplicate
    raise RuntimeError("dedupe key kept flapping between insert and duplicate paths")
