"""Agent tasks under the claim lock (ARCHITECTURE §7), shared by the push worker and the pull runtime API.

P1 no work without a won claim; P2 a lost claim is a skip; P3 readiness (due, backoff elapsed, a free
concurrency slot of the agent) is checked at claim time, in the database; P4 the holder renews; P5 only
the holder's report ends a lease. A refused renew or report of a caller who proved nothing but the task id
(``sent`` given) is audited as an ``anonymous`` actor with only the size and SHA-256 of what it sent, so
an unauthenticated write leaves nothing of its content behind. Errors (under ``hookgate.errors.HookgateError``)::

    TaskError
     └── TaskNotFound   the task does not exist
    LeaseLost           the token is not the current lease: recorded as LATE_RESULT, never applied
     └── TaskCancelled  the token held the task when it was cancelled (same recording)
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn
from uuid import UUID

import asyncpg

from autopilot import audit, lifecycle
from hookgate import metrics, retry
from hookgate.database import Conn
from hookgate.errors import HookgateError, LeaseLost, TaskCancelled
from sql import Q

#: A failed report with one of these retry classes goes back to the queue while attempts are left.
RETRYABLE_CLASSES = frozenset({"transient", "retryable"})
_RNG = random.Random()


class TaskError(HookgateError):
    """Base of the claim-lock errors."""


class TaskNotFound(TaskError):
    """No such task."""


@dataclass(frozen=True)
class Claimed:
    """A task won by a claim, with the lease that proves it."""

    id: UUID
    workspace_id: UUID
    run_id: UUID | None
    agent_id: UUID
    payload: Any
    attempt: int
    max_attempts: int
    lease_token: UUID
    lease_expires_at: datetime
    autopilot_id: UUID | None = None
    autopilot_title: str | None = None
    autopilot_instructions: str | None = None
    endpoint_url: str | None = None
    timeout_s: float = 10.0
    signing_secret_ct: bytes | None = None
    #: The agent's previous signing secret while a rotation's window lasts: pushes are signed with both.
    previous_secret_ct: bytes | None = None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Claimed:
        """Build from a ``task_claim`` row."""
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Report:
    """A holder's final word on a task (the runtime API's report body, or a push outcome)."""

    status: str
    result: Any = None
    error: str | None = None
    retry_class: str | None = None
    #: A retryable failure waits this long for its next attempt; None: no attempt is left, it fails.
    retry_after_s: float | None = None
    #: Give the attempt back (its agent is unhealthy: the task waits for the agent, spending nothing).
    refund: bool = False


@dataclass(frozen=True)
class Sent:
    """What an unauthenticated caller sent, as its LATE_RESULT keeps it: size and SHA-256, never the content."""

    size: int
    sha256: str

    @classmethod
    def of(cls, raw: bytes) -> Sent:
        """The size and digest of a request body."""
        return cls(len(raw), hashlib.sha256(raw).hexdigest())


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with equal jitter: ``base × 2^(attempt-1)`` capped, then half of it randomised."""
    delay = min(cap, base * 2.0 ** max(0, attempt - 1))
    jitter: float = (rng or _RNG).uniform(0, delay / 2)
    return delay / 2 + jitter


async def retry_delay(conn: Conn, task_id: UUID, default: retry.Schedule) -> float | None:
    """How long a retryable failure of the task's current attempt waits: its agent's schedule, else ``default``.

    None when the schedule has no delay left (the attempt was the last).
    """
    state = await conn.fetchrow(Q.task_state, task_id)
    if state is None:
        return None
    own = state["retry_schedule"]
    return (retry.Schedule.of(own) if own else default).delay(max(1, state["attempt"]))


def push_lease_s(timeout_s: float, cap_s: float, margin_s: float) -> float:
    """The lease of a push attempt: the (capped) agent timeout plus a margin, so a crashed pusher's task frees soon."""
    return min(timeout_s, cap_s) + margin_s


async def claim(
    conn: Conn, *, agent_id: UUID, lease_s: float, holder: str, actor_type: str, limit: int = 1,
    task_id: UUID | None = None, now: datetime | None = None, cap: int | None = None,
) -> list[Claimed]:
    """Claim up to ``limit`` due tasks of an agent within its concurrency cap (or only ``task_id``).

    ``cap``: no agent's cap above it (``HOOKGATE_AGENT_MAX_CONCURRENCY``; None: each agent's own).
    """
    rows = await conn.fetch(Q.task_claim, agent_id, task_id, limit, lease_s, holder, actor_type, now, cap)
    metrics.CLAIMS.labels("tasks").inc(len(rows))
    return [Claimed.from_row(r) for r in rows]


async def renew(
    conn: Conn, task_id: UUID, lease_token: UUID, *, lease_s: float, actor_type: str, actor_id: str | None,
    sent: Sent | None = None,
) -> datetime:
    """Extend the holder's lease by ``lease_s`` from now; raises LeaseLost if the token is not current."""
    expires: datetime | None = await conn.fetchval(Q.task_renew, task_id, lease_token, lease_s, actor_type, actor_id)
    if expires is None:
        await _refuse(conn, task_id, "renew", actor_type, actor_id, sent=sent, lease_token=lease_token)
    return expires


async def report(
    conn: Conn, task_id: UUID, lease_token: UUID, rep: Report, *, actor_type: str, actor_id: str | None,
    sent: Sent | None = None,
) -> str:
    """Apply the holder's report: ``"applied"``, or ``"repeated"`` for the same holder's second report.

    A retryable failure with attempts left goes back to the queue; otherwise the task ends and its run ends
    with it. Any other token raises LeaseLost after recording LATE_RESULT (``sent``: see the module doc).
    """
    # Inside a caller's transaction (batched push outcomes) no savepoint: the caller rolls back as a whole.
    async with contextlib.nullcontext() if conn.is_in_transaction() else conn.transaction():
        if rep.status == "failed" and rep.retry_class in RETRYABLE_CLASSES and rep.retry_after_s is not None:
            back = await conn.fetchrow(
                Q.task_retry, task_id, lease_token, rep.retry_after_s, rep.error, rep.retry_class,
                actor_type, actor_id, rep.refund,
            )
            if back is not None:
                metrics.RETRIES.labels("tasks").inc()
                return "applied"
        done = await conn.fetchrow(
            Q.task_finish, task_id, lease_token, rep.status, rep.result, rep.error, rep.retry_class,
            actor_type, actor_id,
        )
        if done is not None:
            await lifecycle.task_finished(conn, done["run_id"], done["status"], done["error"])
            return "applied"
    state = await conn.fetchrow(Q.task_state, task_id)
    if state is not None and state["released_token"] == lease_token and state["status"] != "cancelled":
        return "repeated"
    await _refuse(conn, task_id, "report", actor_type, actor_id, rep, sent, lease_token=lease_token)


async def accept(conn: Conn, task_id: UUID, lease_token: UUID, *, lease_s: float, actor_id: str) -> datetime | None:
    """An HTTP agent accepted the push (202): keep the lease for ``lease_s`` so it can report later."""
    expires: datetime | None = await conn.fetchval(Q.task_renew, task_id, lease_token, lease_s, "worker", actor_id)
    return expires


async def release(conn: Conn, task_id: UUID, lease_token: UUID, *, holder: str, actor_type: str = "worker",
                  reason: str = "shutdown", unclaimed: bool = False) -> bool:
    """A holder gives an unfinished task back (queued, due now); ``unclaimed``: nobody got the lease.

    A stopping worker's push may have started, so its attempt counts; a claim nobody received gives it back.
    """
    return await conn.fetchval(Q.task_release, task_id, lease_token, actor_type, holder, reason,
                               unclaimed) is not None


async def _refuse(
    conn: Conn, task_id: UUID, op: str, actor_type: str, actor_id: str | None, rep: Report | None = None,
    sent: Sent | None = None, *, lease_token: UUID | None = None,
) -> NoReturn:
    state = await conn.fetchrow(Q.task_state, task_id)
    if state is None:
        raise TaskNotFound(str(task_id))
    detail: dict[str, Any] = {"op": op, "task_status": state["status"]}
    if sent is not None:
        actor_type, actor_id = "anonymous", None
        detail |= {"size": sent.size, "sha256": sent.sha256}
    elif rep is not None:
        detail |= {"status": rep.status, "result": rep.result, "error": rep.error, "retry_class": rep.retry_class}
    await audit.record(
        conn, "LATE_RESULT", actor_type=actor_type, actor_id=actor_id, subject_type="agent_task",
        subject_id=task_id, workspace_id=state["workspace_id"], detail=detail,
    )
    if state["status"] == "cancelled" and state["released_token"] == lease_token:
        raise TaskCancelled(str(task_id))  # the holder of the cancelled lease: tell it to stop
    raise LeaseLost(str(task_id))
