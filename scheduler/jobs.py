"""The autopilot schedule job: schedule triggers fire latest-only (maintenance jobs: ``scheduler.maintenance``).

``autopilot_schedule_dispatch`` has one scope per enabled schedule trigger. Its planner reads only the
due triggers (``autopilot_trigger_due_idx``), keeps a trigger's single flight (never two occurrences in
flight, never a newer one while an older one waits for its retry), and picks the newest occurrence in
``(last plan, now]`` unless it is more than 5 minutes late. Its handler re-checks the trigger, admits
the run through the admission gate (idempotent on ``(trigger_id, planned_at)``: a retry after a crash
finds and reuses the run), applies the overlap policy, and wakes workers with NOTIFY ``hookgate_runs``.
Fresh occurrences are decided the same way for a whole batch and fired by one statement (``trigger_fire``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import admission
from hookgate import metrics
from hookgate.database import Conn
from scheduler.cron import InvalidSchedule, Schedule, latest_only
from scheduler.execution import hold, succeed_in
from scheduler.spec import Batch, CustomPlans, JobRun, JobSpec, Plan, Scan, SchedulerError
from sql import Q

log = logging.getLogger("hookgate.scheduler")

SCHEDULE_JOB = "autopilot_schedule_dispatch"
LATE_AFTER = timedelta(minutes=5)
WINDOW = timedelta(hours=24)
_TICK = timedelta(seconds=1)
#: The planner's cursor before the first trigger: ``(next_fire_at, id)`` sorts after it for every trigger.
_BEFORE_ALL = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))
#: Unfinished runs of a trigger at which a newly admitted run is skipped, per overlap policy ('allow': never).
_ACTIVE_LIMIT = {"skip": 1, "buffer_one": 2}


# ------------------------------------------------------------------------------------------ plans
@lru_cache(maxsize=4096)
def schedule_for(cron: str, timezone: str) -> Schedule:
    """The parsed schedule of a trigger (cached: many triggers share a cron)."""
    return Schedule.parse(cron, timezone)


@lru_cache(maxsize=65536)
def next_after(schedule: Schedule, at: datetime) -> datetime:
    """``schedule.next_after(at)``, cached: triggers sharing a cron share their occurrences."""
    return schedule.next_after(at)


@lru_cache(maxsize=65536)
def is_occurrence(schedule: Schedule, at: datetime) -> bool:
    """Whether ``at`` is an occurrence of ``schedule`` (a plan of an edited cron may no longer be)."""
    return schedule.latest_in(at - timedelta(microseconds=1), at) == at


def newest_due(
    schedule: Schedule, last_plan: datetime | None, now: datetime, *, hint: datetime | None,
    anchor: datetime | None,
) -> datetime | None:
    """``cron.latest_only`` with the 5-minute lateness rule and the 24 h window.

    Answered from the cache when ``hint`` (the stored next_fire_at) is already the newest occurrence at or
    before ``now`` (the common case); otherwise ``cron.latest_only`` itself decides.
    """
    if hint is not None and hint <= now and is_occurrence(schedule, hint) and next_after(schedule, hint) > now:
        since = last_plan if last_plan is not None else anchor
        floor = now - WINDOW if since is None else max(since, now - WINDOW)
        return hint if floor < hint and now - hint <= LATE_AFTER else None
    return latest_only(schedule, last_plan, now, late_after=LATE_AFTER, window=WINDOW, anchor=anchor)


def _last_plan(row: asyncpg.Record) -> datetime | None:
    """The catch-up watermark: the newest plan claimed, or last_fired_at once executions were pruned."""
    known = [t for t in (row["last_plan"], row["last_fired_at"]) if t is not None]
    return max(known) if known else None


def plan_trigger(row: asyncpg.Record, now: datetime) -> tuple[datetime | None, datetime | None]:
    """For one due trigger: ``(plan to claim or None, when to look at the trigger again)``."""
    if row["flight_status"] == "RUNNING":  # single flight: the occurrence in flight finishes first
        return None, max(row["flight_stale_after"], now + _TICK)
    if row["flight_status"] == "FAILED":  # its retry comes before any newer occurrence
        return None, max(row["flight_retry_at"], now + _TICK)
    try:
        schedule = schedule_for(row["cron"], row["timezone"])
    except InvalidSchedule as exc:
        log.error("schedule trigger has an invalid cron; it will not fire", extra={"trigger": str(row["id"]),
                                                                                   "error": str(exc)})
        return None, None
    # A trigger that never fired is anchored at its creation, so it does not fire an occurrence
    # that predates it.
    plan = newest_due(schedule, _last_plan(row), now, hint=row["next_fire_at"], anchor=row["created_at"])
    if plan is not None:  # if it is still in flight then, the planner defers it to its lease's stale time
        return plan, next_after(schedule, plan)
    metrics.SCHEDULER_PLANS.labels(SCHEDULE_JOB, "late_skipped").inc()  # due, but late: dropped once
    return None, schedule.next_after(now)


@dataclass(frozen=True)
class DuePlan(Plan):
    """A plan of a due trigger, with the trigger as the planner read it (locked): the fresh path fires from it.

    ``again`` is the trigger's next evaluation once this plan is claimed (its next occurrence): the fire
    statement moves it there, and so does the planner's own write when the plan is claimed another way.
    """

    row: asyncpg.Record = field(compare=False, repr=False)
    again: datetime = field(compare=False)


async def plan_due(conn: Conn, now: datetime, limit: int, scan: Scan) -> list[Plan]:
    """The custom planner: lock up to ``limit`` due triggers after ``scan``'s cursor and plan them.

    Each trigger's next evaluation (``next_fire_at``) moves so that it is not due again until something
    can change (its occurrence finished, its retry is due, or the next occurrence comes): here for the
    triggers it does not plan, and for the planned ones in the statement that fires them (``trigger_fire``), or,
    if they are claimed the ordinary way, by the handler (``trigger_mark_fired``); until then a planned trigger
    is still due, and a planner that finds its occurrence in flight defers it. The cursor is the
    ``(next_fire_at, id)`` of the last trigger the tick read: what was skipped below it (locked by another
    scheduler, who may yet roll back) is due at the next tick, which starts from the beginning.
    """
    after: tuple[datetime, UUID] = scan.after or _BEFORE_ALL
    await conn.execute(Q.cron_plan_afresh)  # never a generic plan made while the tables were small
    rows = await conn.fetch(Q.trigger_due_schedules, now, limit, SCHEDULE_JOB, *after)
    await conn.execute(Q.cron_plan_default)
    if rows:  # the tick's workers share the cursor: keep the furthest
        scan.after = max(after, (rows[-1]["next_fire_at"], rows[-1]["id"]))
    decided = [plan_trigger(row, now) for row in rows]
    held = [(row["id"], again) for row, (plan, again) in zip(rows, decided, strict=True) if plan is None]
    if held:
        await conn.execute(Q.trigger_defer, [i for i, _ in held], [again for _, again in held], [None] * len(held))
    return [DuePlan(str(row["id"]), plan, row, again) for row, (plan, again) in zip(rows, decided, strict=True)
            if plan is not None and again is not None]


async def next_due(conn: Conn, now: datetime) -> datetime | None:
    """When the next schedule trigger falls due."""
    at: datetime | None = await conn.fetchval(Q.trigger_next_due)
    return at


# ---------------------------------------------------------------------------------------- handler
def _noop_reason(state: asyncpg.Record | None, run: JobRun) -> str | None:
    """Why the occurrence must not run any more (state re-checked at fire time), or None."""
    if state is None:
        return "trigger_missing"
    if state["deleted"]:
        return "trigger_deleted"
    if state["kind"] != "schedule":
        return "trigger_not_schedule"
    if not state["enabled"]:
        return "trigger_disabled"
    if state["autopilot_status"] != "active":
        return f"autopilot_{state['autopilot_status']}"
    try:
        schedule = schedule_for(state["cron"], state["timezone"])
    except InvalidSchedule:
        return "schedule_invalid"
    if not is_occurrence(schedule, run.plan_time):
        return "schedule_changed"
    return None


def _payload(state: asyncpg.Record, plan: datetime) -> dict[str, Any]:
    return {"event": "schedule.fired",
            "payload": {"trigger_id": str(state["id"]), "planned_at": plan.isoformat(),
                        "cron": state["cron"], "timezone": state["timezone"]}}


Todo = list[tuple[JobRun, asyncpg.Record]]


async def _admit_all(conn: Conn, todo: Todo, heartbeat_timeout_s: float) -> dict[JobRun, dict[str, Any]]:
    """Admit every occurrence's run in one batch (or find the one a crashed attempt admitted), then apply overlap."""
    requests = [admission.Request(state["autopilot_id"], "schedule", _payload(state, run.plan_time), state["id"],
                                  planned_at=run.plan_time) for run, state in todo]
    admitted = await admission.admit_many(conn, requests, heartbeat_timeout_s=heartbeat_timeout_s)
    found = {run: adm for (run, _), adm in zip(todo, admitted, strict=True)}
    skipped = await _apply_overlap(conn, todo, found)
    results = {}
    for run, _ in todo:
        adm = found[run]
        status, reason = skipped.get(adm.run_id, (adm.status, adm.reason_code))
        results[run] = {"run_id": str(adm.run_id), "status": status, "reason_code": reason,
                           "reused": not adm.created}
    return results


def overlap_outcome(policy: str, active_runs: int | None) -> tuple[str, str] | None:
    """What the overlap policy makes of a newly admitted pending run: ``(reason_code, reason)``, or None.

    ``previous_run_active``: the trigger has too many unfinished runs, the new one is skipped. ``buffered``:
    under ``buffer_one``, a new run behind one unfinished run waits (still pending); the run worker
    dispatches it once that run ends. The trigger is single-flight in the scheduler, so no other admission
    for it runs meanwhile.
    """
    limit = _ACTIVE_LIMIT.get(policy)
    if limit is None or active_runs is None:
        return None
    if active_runs >= limit:
        return "previous_run_active", f"a previous run of this trigger is still active (overlap policy {policy})"
    if policy == "buffer_one" and active_runs >= 1:
        return "buffered", "waits for the active run of this trigger to end (overlap policy buffer_one)"
    return None


async def _apply_overlap(
    conn: Conn, todo: Todo, found: dict[JobRun, admission.Admission]
) -> dict[UUID, tuple[str, str]]:
    """Apply the overlap policy to newly admitted pending runs; returns the new ``(status, reason_code)`` of each."""
    overlapping: list[tuple[UUID, str]] = []
    buffered: list[tuple[UUID, str]] = []
    for run, state in todo:
        adm = found[run]
        if not adm.created or adm.status != "pending":
            continue
        outcome = overlap_outcome(state["overlap_policy"], state["active_runs"])
        if outcome is not None:
            (overlapping if outcome[0] == "previous_run_active" else buffered).append((adm.run_id, outcome[1]))
    rows = await conn.fetchmany(Q.run_skip_overlap, overlapping) if overlapping else []
    rows += await conn.fetchmany(Q.run_buffer, buffered) if buffered else []
    return {row["id"]: (row["status"], row["reason_code"]) for row in rows}


async def dispatch(batch: Batch, *, heartbeat_timeout_s: float) -> None:
    """Handle claimed occurrences in ONE transaction with their SUCCESS rows: all or nothing.

    ``heartbeat_timeout_s`` (the setting) is how recent a pull runtime's heartbeat must be for the gate.
    """
    async with batch.pool.acquire() as conn, conn.transaction():
        runs = await hold(conn, batch.runs, batch.spec.stale_timeout)
        if not runs:
            return
        await _handle(conn, runs, heartbeat_timeout_s, mark_fired=True)
        await succeed_in(conn, runs, await batch.clock.now())


class FireRefused(SchedulerError):
    """The fire statement could not fire its whole batch as planned: the attempt must roll back."""


async def dispatch_fresh(
    conn: Conn, batch: Batch, *, heartbeat_timeout_s: float
) -> list[asyncpg.Record] | None:
    """The transactional handler: fresh occurrences, fired in the transaction that planned them.

    The planner locked their triggers and set ``last_fired_at`` and ``next_fire_at`` in this transaction,
    from the schedule as it is now, so the handler's own trigger rewrite would change nothing: it is left out.
    With the planner's rows at hand, the whole batch is one statement (``trigger_fire``): claims, runs and
    wake-ups; returns its claim rows. Raises :class:`FireRefused` (the attempt rolls back, and its plans are
    claimed the ordinary way) unless every occurrence was claimed and every run inserted as decided.
    """
    due = [p for p in batch.plans if isinstance(p, DuePlan)]
    if batch.claim is None or len(due) != len(batch.runs):
        await _handle(conn, batch.runs, heartbeat_timeout_s, mark_fired=False)
        return None
    return await _fire(conn, batch, due, heartbeat_timeout_s)


#: A verdict of trigger_fire: the autopilot status seen, a no-op's result (JSON text) or the run's status, reason
#: code and reason, its workspace, rule version and accountable member.
Outcome = tuple[str, str | None, str | None, str | None, str | None, UUID | None, UUID | None, UUID | None]


async def _fire(conn: Conn, batch: Batch, due: list[DuePlan], heartbeat_timeout_s: float) -> list[asyncpg.Record]:
    """Decide every occurrence of the batch (a no-op, or its run's status), then fire them in one statement.

    The occurrences of one autopilot and publisher share one gate decision, so the work per occurrence is
    its plan, its overlap check and its elements of four arrays; the database does the rest, set-based,
    including each trigger's move to its next occurrence.
    """
    assert batch.claim is not None
    runs, states = batch.runs, [p.row for p in due]
    todo: Todo = []
    for run, state in zip(runs, states, strict=True):
        reason = _noop_reason(state, run)
        if reason is not None:
            run.result = {"noop": True, "reason": reason}
        else:
            todo.append((run, state))
    decisions = await _decide(conn, todo, heartbeat_timeout_s)
    outcomes: dict[Outcome, int] = {}
    index: list[int] = []
    for run, state in zip(runs, states, strict=True):
        if run.result is not None:
            outcome: Outcome = (state["autopilot_status"], json.dumps(run.result), None, None, None, None, None, None)
        else:
            decision = decisions[(state["autopilot_id"], state["published_by_id"])]
            status, code, why = _run_status(decision, state)
            outcome = (state["autopilot_status"], None, status, code, why, decision.workspace_id,
                       decision.rule_version_id, decision.accountable_id)
        index.append(outcomes.setdefault(outcome, len(outcomes) + 1))
    plans = sorted({r.plan_time for r in runs})
    spec = batch.spec
    rows = await conn.fetch(
        Q.trigger_fire, spec.name, batch.claim.runner_id, batch.now, spec.stale_timeout.total_seconds(),
        batch.claim.lock_key, await batch.clock.now(), spec.max_attempts,
        [UUID(r.scope_id) for r in runs], [r.plan_time for r in runs], index,
        *(list(column) for column in zip(*outcomes, strict=True)), plans, [p.isoformat() for p in plans],
        [p.again for p in due])
    made, wanted, changed = (rows[0]["made"], rows[0]["wanted"], rows[0]["changed"]) if rows else (0, len(todo), 0)
    if len(rows) != len(runs) or made != wanted or changed:
        raise FireRefused(f"of {len(runs)} occurrence(s), {len(rows)} claimed, {made} of {wanted} run(s) inserted, "
                          f"{changed} with their autopilot changed since they were planned")
    return rows


def _run_status(decision: admission.Decision, state: asyncpg.Record) -> tuple[str, str | None, str | None]:
    """A new run's ``(status, reason_code, reason)``: the gate's refusal, else what the overlap policy makes of it."""
    if decision.reason_code is not None:
        return "skipped", decision.reason_code, decision.reason
    overlap = overlap_outcome(state["overlap_policy"], state["active_runs"])
    if overlap is None:
        return "pending", None, None
    return ("skipped" if overlap[0] == "previous_run_active" else "pending"), *overlap


async def _decide(
    conn: Conn, todo: Todo, heartbeat_timeout_s: float
) -> dict[tuple[UUID, UUID | None], admission.Decision]:
    """The admission gate's decision per ``(autopilot, trigger publisher)`` of the occurrences to fire.

    Its facts are one statement for the batch, one row per pair: the planner locked each trigger, live and
    enabled, so what the gate reads of a trigger (its state and its publisher) is the same for all of a pair.
    """
    pairs: dict[tuple[UUID, UUID | None], asyncpg.Record] = {}
    for _, state in todo:
        pairs.setdefault((state["autopilot_id"], state["published_by_id"]), state)
    if not pairs:
        return {}
    requests = [admission.Request(state["autopilot_id"], "schedule", {}, state["id"]) for state in pairs.values()]
    facts = await admission.read_facts(conn, requests, heartbeat_timeout_s)
    return {pair: admission.Decision.of(admission.require_autopilot(fact, pair[0]), "schedule")
            for pair, fact in zip(pairs, facts, strict=True)}


async def _handle(conn: Conn, runs: list[JobRun], heartbeat_timeout_s: float, *, mark_fired: bool) -> None:
    """Re-check each occurrence's trigger, admit its run (or record a no-op), wake workers; sets results."""
    rows = await conn.fetch(Q.trigger_schedule_state, [UUID(r.scope_id) for r in runs])
    states = {str(row["id"]): row for row in rows}
    todo: Todo = []
    fired: list[tuple[asyncpg.Record, datetime]] = []
    for run in runs:
        state = states.get(run.scope_id)
        reason = _noop_reason(state, run)
        if reason is not None:
            run.result = {"noop": True, "reason": reason}
        elif state is not None:
            todo.append((run, state))
        if state is not None and reason not in ("trigger_missing", "schedule_invalid"):
            fired.append((state, run.plan_time))
    results = await _admit_all(conn, todo, heartbeat_timeout_s) if todo else {}
    for run, _ in todo:
        run.result = results[run]
    if mark_fired:
        await _mark_fired(conn, fired)
    wake = [UUID(r["run_id"]) for r in results.values() if r["status"] == "pending"]
    if wake:
        await conn.execute(Q.run_notify_pending, wake)


async def _mark_fired(conn: Conn, fired: list[tuple[asyncpg.Record, datetime]]) -> None:
    if not fired:
        return
    nexts = [next_after(schedule_for(s["cron"], s["timezone"]), plan) for s, plan in fired]
    await conn.execute(
        Q.trigger_mark_fired, [s["id"] for s, _ in fired], [plan for _, plan in fired], nexts,
        [s["cron"] for s, _ in fired], [s["timezone"] for s, _ in fired],
    )


async def make_due_again(conn: Conn, runs: list[JobRun], now: datetime) -> None:
    """After a failed attempt, make its triggers due now.

    The planner then waits for the retry, or, with attempts exhausted, moves on to the newest occurrence
    at once instead of at the next occurrence the claim had recorded.
    """
    await conn.execute(Q.trigger_defer, [UUID(r.scope_id) for r in runs], [now] * len(runs), [None] * len(runs))


def autopilot_schedule_job(batch_size: int = 100, *, heartbeat_timeout_s: float) -> JobSpec:
    """``autopilot_schedule_dispatch`` with the parameters of ARCHITECTURE §8; the gate uses ``heartbeat_timeout_s``."""

    async def handler(batch: Batch) -> None:
        await dispatch(batch, heartbeat_timeout_s=heartbeat_timeout_s)

    async def in_transaction(conn: Conn, batch: Batch) -> list[asyncpg.Record] | None:
        return await dispatch_fresh(conn, batch, heartbeat_timeout_s=heartbeat_timeout_s)

    return JobSpec(
        name=SCHEDULE_JOB, handler=handler, catch_up=CustomPlans(plans=plan_due, next_due=next_due),
        scope_kind="trigger", max_plans_per_tick=5, run_timeout=timedelta(minutes=2),
        stale_timeout=timedelta(minutes=5), heartbeat=timedelta(seconds=30), stale_reentry=True,
        max_attempts=3, retry_backoff=(timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15)),
        retry_jitter=0.1, single_flight=True, batch_size=batch_size, on_failure=make_due_again,
        transactional=in_transaction,
    )

