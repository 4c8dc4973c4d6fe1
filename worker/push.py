"""Push tasks to HTTP agents (ARCHITECTURE §7, §11), Standard-Webhooks-signed, ``webhook-id`` = task id.

During a signing-secret rotation's window ``webhook-signature`` holds two space-separated signatures, by the
new secret and by the old one (Standard Webhooks lets a receiver accept any one it can verify).

2xx is done; 202 is accepted (the agent reports later to ``report_url`` with the lease token, which is the
capability: no bearer needed); 408, 429, 5xx, timeouts and connection errors are retried on the agent's retry
schedule (:mod:`hookgate.retry`), honouring ``Retry-After`` up to a day; any other 4xx fails the task. Every
attempt is kept as a ``task_attempt`` row (outcome, HTTP status, a safe subset of the answer's headers and its
first 4 KiB), and counts towards the agent's health: after ``agent_trip_after`` consecutive failures the
agent is unhealthy (its circuit is open) and its tasks wait, without spending attempts, for a probe to
succeed (``hookgate_slots_take`` lets one through per probe interval). Every connection passes the
egress policy (:mod:`hookgate.egress`) on the address it is about to reach; a refused one fails the task
at once (``egress_forbidden``). A task cancelled while its push is in flight (NOTIFY ``hookgate_cancels``,
payload = task id) has its request aborted: the outcome is ``cancelled`` and writes nothing (the task is
cancelled already). Transport faults all read ``unreachable`` whatever their cause, so the
error a tenant sees cannot tell a closed port from an open one. Pushes run as their own
asyncio tasks, bounded per process (``push_inflight``, at most ``push_connections``: a push never waits for a
connection) and per agent (its ``max_concurrency``, enforced at claim time in the database), each with the
agent's timeout. A process's slots are shared fairly (:mod:`worker.fairshare`): workspaces first, then agents
within each, checked whenever tasks are claimed for this process (here, in the take, and in a slot held for the
one-by-one dispatch path: :class:`Reservations`): a hanging workspace holds only its own share, however many
agents it has.

The client is aiohttp, not httpx: on this 2-core machine httpx's pool managed ~230 pushes/s with 40 in
flight where aiohttp did ~5,000/s (see docs/BENCHMARKS.md), and the push client is the drain's bottleneck.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import aiohttp
from multidict import CIMultiDictProxy

from autopilot import agents, alerts, tasks
from hookgate import crypto, database, egress, jsontext, metrics, notify, retry
from hookgate.context import Context
from hookgate.errors import LeaseLost
from hookgate.notify import NotifyListener
from sql import Q
from worker.fairshare import Budget, Shares
from worker.loop import PollingService

log = logging.getLogger("hookgate.push")

RETRY_STATUSES = frozenset({408, 429})
MAX_RESULT_BYTES = 64 * 1024
#: The one text of every transport fault (refused, reset, TLS, not HTTP …): no port-scan oracle.
UNREACHABLE = "unreachable: the agent could not be reached"
TIMEOUT = "timeout: the agent did not answer in time"
#: Push outcomes written per transaction when many finish together.
OUTCOME_GROUP = 64
#: While other pushes are still in flight, a flush waits this long for their outcomes to join its group: a flush's
#: statements cost about as much for one outcome as for a dozen.
FLUSH_GATHER_S = 0.005
#: The most tasks one claim of the push loop takes for an agent.
CLAIM_BATCH = 32
#: An agent whose queued tasks wait for its slots is claimed for once a quarter of its slots (at most CLAIM_BATCH)
#: are free, or once it has waited CLAIM_WAIT_S for that: part of a claim's cost is fixed (about a dozen
#: statements, a commit), and claiming for every slot or two that freed (~12 tasks per claim in bench/dispatch.py
#: at the default cap) paid it over and over. While an agent waits, the loop looks again every CLAIM_GATHER_S
#: instead of at every finished push (a lookup each).
CLAIM_WAIT_S = 0.05
CLAIM_GATHER_S = 0.01
#: Of an agent's answer an attempt keeps these headers and the first EXCERPT_BYTES of its body.
KEPT_HEADERS = ("content-type", "content-length", "retry-after", "date", "server", "location", "x-request-id",
                "request-id", "x-correlation-id")
EXCERPT_BYTES = 4096
#: Attempt outcomes that count as the agent failing (its health): it could not be reached or did not cope.
FAILING = frozenset({"failed", "timeout", "unreachable"})


@dataclass(frozen=True)
class Outcome:
    """What an agent's answer means (``done``, ``accepted``, ``retry``, ``terminal``, ``cancelled``), as seen.

    ``label`` is the attempt's recorded outcome (``succeeded``, ``accepted``, ``failed``, ``timeout``,
    ``unreachable``, ``egress_forbidden``, ``cancelled``); ``hint`` an agent's ``Retry-After`` in seconds.
    ``cancelled``: the task was cancelled during the push, which was aborted; only the attempt is written.
    """

    kind: str
    detail: str
    label: str
    hint: float | None = None
    result: Any = None
    #: The task's retry class when it is not the kind's own (``transient`` / ``permanent``).
    retry_class: str | None = None
    http_status: int | None = None
    headers: dict[str, str] | None = None
    body: str | None = None


@dataclass(frozen=True)
class Attempt:
    """When one push ran: wall-clock start and end, and its duration measured on the monotonic clock."""

    started_at: datetime
    finished_at: datetime
    duration_ms: int


@dataclass(frozen=True)
class Health:
    """An agent's health after a flush, and its own retry schedule (None: the default one)."""

    unhealthy: bool
    schedule: retry.Schedule | None


#: A push the egress policy refused: terminal, since the same URL is refused again on every attempt.
EGRESS_FORBIDDEN = Outcome("terminal", egress.CONNECT_REFUSED_TEXT, "egress_forbidden", retry_class="egress_forbidden")
#: A push aborted because its task was cancelled meanwhile.
CANCELLED = Outcome("cancelled", "the task was cancelled; the push was aborted", "cancelled")


def claim_floor(cap: int) -> int:
    """How many free slots of an agent of concurrency ``cap`` the push loop waits for before it claims."""
    return max(1, min(CLAIM_BATCH, cap // 4))


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date), or None if absent/invalid."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def classify(status: int, headers: Mapping[str, str], body: bytes = b"") -> Outcome:
    """Map an agent's HTTP answer to an outcome (with what its attempt keeps of the answer)."""
    seen = Outcome("terminal", f"agent answered {status}", "failed", http_status=status,
                   headers=kept_headers(headers), body=excerpt(body))
    if status == 202:
        return replace(seen, kind="accepted", detail="agent accepted; it reports later", label="accepted")
    if 200 <= status < 300:
        return replace(seen, kind="done", label="succeeded", result=_result(status, headers, body))
    if status in RETRY_STATUSES or status >= 500:
        return replace(seen, kind="retry", hint=retry_after_s(headers.get("retry-after")))
    return seen


def kept_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of an answer an attempt keeps: a fixed, harmless subset (never cookies or auth)."""
    return {name: headers[name][:256] for name in KEPT_HEADERS if name in headers}


def excerpt(body: bytes) -> str | None:
    """The first 4 KiB of an answer's body as text (undecodable bytes replaced), or None when empty."""
    if not body:
        return None
    text = body[:EXCERPT_BYTES].decode("utf-8", "replace").replace("\x00", "\ufffd")
    while len(text.encode()) > EXCERPT_BYTES:  # replacement characters take 3 bytes each
        text = text[:-1]
    return text


def _result(status: int, headers: Mapping[str, str], body: bytes) -> Any:
    """The task's result: the status, and the reply's JSON when it is small, nested at most MAX_DEPTH and storable.

    A reply the agent controls must not reach a recursion limit here or fail the group commit of other tasks.
    """
    result: dict[str, Any] = {"http_status": status}
    if body and len(body) <= MAX_RESULT_BYTES and "json" in headers.get("content-type", ""):
        with contextlib.suppress(ValueError):  # not UTF-8 JSON, NaN/Infinity, or nested too deep (TooDeep)
            value = jsontext.loads(body, parse_constant=jsontext.refuse_constant)
            if jsontext.unstorable(body, value) is None:
                result["body"] = value
    return result


async def read_capped(content: aiohttp.StreamReader, cap: int) -> bytes:
    """The body up to ``cap + 1`` bytes (one more tells "over the cap"), read across chunks until EOF."""
    try:
        return await content.readexactly(cap + 1)
    except asyncio.IncompleteReadError as short:
        return short.partial


def _lower(headers: CIMultiDictProxy[str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def report_url(public_url: str, task_id: UUID) -> str:
    """Where an agent reports a task it accepted with 202."""
    return f"{public_url.rstrip('/')}/v1/runtime/tasks/{task_id}/report"


def push_body(claimed: tasks.Claimed, public_url: str) -> bytes:
    """The body of a push, exactly the fields of ARCHITECTURE §11."""
    return json.dumps({
        "task_id": str(claimed.id), "run_id": None if claimed.run_id is None else str(claimed.run_id),
        "attempt": claimed.attempt,
        "autopilot": {"id": None if claimed.autopilot_id is None else str(claimed.autopilot_id),
                      "title": claimed.autopilot_title, "instructions": claimed.autopilot_instructions},
        "payload": claimed.payload, "lease_token": str(claimed.lease_token),
        "report_url": report_url(public_url, claimed.id),
    }, separators=(",", ":"), ensure_ascii=False).encode()


#: A push waiting for its group commit: the claim, its outcome, when it ran, and the waiter.
Pending = tuple[tasks.Claimed, Outcome, Attempt, "asyncio.Future[None]"]


class Pusher:
    """Runs pushes of claimed tasks concurrently; ``stop()`` lets them finish, then releases the rest."""

    name = "push"

    def __init__(self, ctx: Context, *, holder: str, wake: NotifyListener | None = None) -> None:
        self.ctx, self.settings, self.holder, self.wake = ctx, ctx.settings, holder, wake
        self._client: aiohttp.ClientSession | None = None
        self.egress = egress.Policy.from_settings(ctx.settings)
        self._inflight: dict[asyncio.Task[None], tasks.Claimed] = {}
        #: The fair shares of this process's push slots, by workspace then agent.
        self.shares = Shares(min(self.settings.push_inflight, self.settings.push_connections))
        #: Held from reading the shares to submitting what was claimed with them (the take, the push loop): two
        #: claims in flight at once would each see the other's slots free, and together pass a workspace's part.
        self.claiming = asyncio.Lock()
        #: Slots held for claims of the one-by-one dispatch path, not yet pushes (:class:`Reservations`).
        self._held = 0
        self._outcomes: list[Pending] = []
        #: How long a flush waits for the outcomes of pushes still in flight (FLUSH_GATHER_S).
        self.flush_gather_s = FLUSH_GATHER_S
        self._flusher: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self.stopping = False
        #: Queued tasks of HTTP agents may be waiting for a slot or for push capacity: only then does a
        #: finished push wake the ``pushes`` loop (a lookup per burst otherwise spent for nothing). Set by any
        #: ``hookgate_tasks`` notification (a task was queued somewhere) and by a pass that saw waiting tasks.
        self.backlog = True
        #: How many ``hookgate_tasks`` notifications arrived (a pass tells from it whether one came meanwhile).
        self.notices = 0
        #: The asyncio task posting each task (by task id) while its request is in flight, and the task ids
        #: whose push a ``hookgate_cancels`` notice aborted.
        self._posting: dict[UUID, asyncio.Task[Any]] = {}
        self._aborted: set[UUID] = set()
        if wake is not None:
            wake.subscribe(notify.TASKS, self._on_task_notice)
            wake.subscribe(notify.CANCELS, self._on_cancel_notice)

    def capacity(self) -> int:
        """How many more pushes this process may start now (slots held for a claim count as taken)."""
        return 0 if self.stopping else self.shares.capacity - len(self._inflight) - self._held

    def hold(self, workspace: UUID, agent: UUID) -> bool:
        """Hold a slot for a push of ``agent`` about to be claimed, if its and its workspace's shares allow one now.

        Not while the take or the push loop claims (:attr:`claiming`): their budgets were read before this slot.
        """
        if self.claiming.locked() or self.capacity() <= 0:
            return False
        if self.shares.budget(all_want=True).room(agent, workspace) <= 0:
            return False
        self.shares.started(agent, workspace)
        self._held += 1
        return True

    def unhold(self, agent: UUID) -> None:
        """Give back a slot :meth:`hold` held that no push used."""
        self.shares.ended(agent)
        self._held -= 1

    def rooms(self) -> Budget:
        """What the take may claim, per agent and per workspace (and for any agent or workspace not seen yet).

        In the take every agent is about to get tasks, so each known one wants more than it holds.
        """
        return self.shares.budget(all_want=True)

    def submit(self, claimed: tasks.Claimed, *, held: bool = False) -> None:
        """Start pushing a claimed task in the background (``held``: in a slot :meth:`hold` held for it)."""
        task = asyncio.create_task(self._guarded(claimed), name=f"push:{claimed.id}")
        self._inflight[task] = claimed
        if held:
            self._held -= 1
        else:
            self.shares.started(claimed.agent_id, claimed.workspace_id)
        task.add_done_callback(self._done)

    def _on_task_notice(self, _payload: str) -> None:
        self.backlog = True
        self.notices += 1

    def _on_cancel_notice(self, payload: str) -> None:
        """A task was cancelled: abort its push if this process is posting it now."""
        try:
            task_id = UUID(payload)
        except ValueError:
            return
        posting = self._posting.get(task_id)
        if posting is not None and task_id not in self._aborted:
            self._aborted.add(task_id)
            posting.cancel()

    def _done(self, task: asyncio.Task[None]) -> None:
        claimed = self._inflight.pop(task, None)
        if claimed is not None:
            self.shares.ended(claimed.agent_id)
        if self.wake is not None and self.backlog:
            self.wake.poke(notify.TASKS)

    async def _guarded(self, claimed: tasks.Claimed) -> None:
        try:
            await self.push(claimed)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The lease still protects the task: it expires and the watchdog requeues it.
            log.exception("push failed unexpectedly", extra={"task_id": str(claimed.id)})

    async def push(self, claimed: tasks.Claimed) -> str:
        """One push attempt of a claimed task, its outcome recorded under the lease; returns the outcome kind."""
        started, clock = datetime.now(UTC), time.monotonic()
        outcome = await self._abortable_post(claimed)
        took = Attempt(started, datetime.now(UTC), round((time.monotonic() - clock) * 1000))
        metrics.PUSH_OUTCOMES.labels(str(claimed.agent_id), outcome.kind).inc()
        await self._record(claimed, outcome, took)
        return outcome.kind

    async def _abortable_post(self, claimed: tasks.Claimed) -> Outcome:
        """:meth:`_post`, aborted (``CANCELLED``) if a cancel notice for the task arrives meanwhile."""
        me = asyncio.current_task()
        assert me is not None
        self._posting[claimed.id] = me
        try:
            return await self._post(claimed)
        except asyncio.CancelledError:
            if claimed.id not in self._aborted or me.cancelling() > 1:
                raise  # cancelled by someone else too (a stopping worker): not ours to swallow
            me.uncancel()
            return CANCELLED
        finally:
            self._posting.pop(claimed.id, None)
            self._aborted.discard(claimed.id)

    async def _post(self, claimed: tasks.Claimed) -> Outcome:
        body = push_body(claimed, self.settings.public_url)
        assert claimed.signing_secret_ct is not None and claimed.endpoint_url is not None
        stamp = int(time.time())
        headers = {
            "content-type": "application/json", "webhook-id": str(claimed.id),
            "webhook-timestamp": str(stamp),
            "webhook-signature": " ".join(crypto.webhook_signature(s, str(claimed.id), stamp, body)
                                          for s in self._secrets(claimed)),
            "user-agent": "hookgate",
        }
        try:
            async with self.egress.attempt(claimed.endpoint_url) as attempt:
                return await self._send(claimed, body, headers, attempt)
        except egress.EgressRefused:
            return EGRESS_FORBIDDEN

    def _secrets(self, claimed: tasks.Claimed) -> list[str]:
        """The agent's signing secret, then its previous one while a rotation's window lasts."""
        context = agents.secret_context(claimed.agent_id)
        sealed = (claimed.signing_secret_ct, claimed.previous_secret_ct)
        return [self.ctx.keyring.decrypt(bytes(ct), context) for ct in sealed if ct is not None]

    async def _send(self, claimed: tasks.Claimed, body: bytes, headers: dict[str, str],
                    attempt: egress.Attempt) -> Outcome:
        """POST once. Every transport fault reads the same (no port-scan oracle); a refused connection is terminal."""
        assert claimed.endpoint_url is not None
        timeout = aiohttp.ClientTimeout(total=min(claimed.timeout_s, self.settings.push_timeout_cap_s))
        try:
            async with self._session(attempt) as client, client.post(
                    claimed.endpoint_url, data=body, headers=headers, timeout=timeout,
                    allow_redirects=False) as response:
                content = await read_capped(response.content, MAX_RESULT_BYTES)
                status, answer = response.status, _lower(response.headers)
        except TimeoutError:
            return Outcome("retry", TIMEOUT, "timeout")
        except (aiohttp.ClientError, OSError):
            return EGRESS_FORBIDDEN if attempt.refused else Outcome("retry", UNREACHABLE, "unreachable")
        return classify(status, answer, content)

    @contextlib.asynccontextmanager
    async def _session(self, attempt: egress.Attempt) -> AsyncIterator[aiohttp.ClientSession]:
        """The shared session; a one-off one, on a fresh connection, for a path under the gateway's own /hooks/.

        A pooled connection was checked when it was opened, for another path: only a new one lets the
        connect-time check see that this request goes to the gateway's webhook ingress.
        """
        if not attempt.own_ports:
            yield self.client()
            return
        async with aiohttp.ClientSession(connector=self.egress.connector(force_close=True)) as session:
            yield session

    def client(self) -> aiohttp.ClientSession:
        """The shared session (created in the running loop on first use), with a bounded connection pool."""
        if self._client is None:
            connector = self.egress.connector(limit=self.settings.push_connections)
            self._client = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        return self._client

    async def _record(self, claimed: tasks.Claimed, outcome: Outcome, took: Attempt) -> None:
        """Queue the outcome for the next group commit and wait until it is written."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._outcomes.append((claimed, outcome, took, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        await done

    async def _flush(self) -> None:
        """Write queued outcomes, up to OUTCOME_GROUP per transaction (one commit for many pushes).

        First the attempts and the agents' health (one statement), since a retry's wait depends on them, then
        the tasks' outcomes.
        """
        while self._outcomes:
            if len(self._outcomes) < OUTCOME_GROUP and len(self._inflight) > len(self._outcomes):
                await asyncio.sleep(self.flush_gather_s)
            group, self._outcomes = self._outcomes[:OUTCOME_GROUP], self._outcomes[OUTCOME_GROUP:]
            try:
                async with self.ctx.pool.acquire() as conn:
                    health = await self._write_attempts(conn, group)
                    rest = await self._write_done(conn, group)
                    await self._write_rest(conn, rest, health)
            except Exception as exc:
                for *_, done in group:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for *_, done in group:
                if not done.done():
                    done.set_result(None)

    async def _write_attempts(self, conn: Any, group: list[Pending]) -> dict[UUID, Health]:
        """Record each push of the group as an attempt and update its agent's health; returns each agent's health.

        Per agent, the failures after its last success in this group count as consecutive (a success resets the
        count first). An agent that tripped or recovered is logged (and announced) once, here.
        """
        per_agent: dict[UUID, list[Any]] = {}  # agent -> [failures since the last success, a success came, error]
        for claimed, outcome, _, _ in group:
            seen = per_agent.setdefault(claimed.agent_id, [0, False, None])
            if outcome.kind in ("done", "accepted"):
                seen[:] = [0, True, None]
            elif outcome.kind == "retry" and outcome.label in FAILING:
                seen[0] += 1
                seen[2] = outcome.detail
        s, rows = self.settings, [(c, o, t) for c, o, t, _ in group]
        per_agent = dict(sorted(per_agent.items()))  # every flush locks health rows in one order
        records = await database.retrying(lambda: conn.fetch(
            Q.push_outcomes_record, [c.id for c, _, _ in rows], [c.attempt for c, _, _ in rows],
            [t.started_at for _, _, t in rows], [t.finished_at for _, _, t in rows],
            [t.duration_ms for _, _, t in rows], [o.label for _, o, _ in rows], [o.http_status for _, o, _ in rows],
            [o.detail if o.kind != "done" else None for _, o, _ in rows],
            [o.headers for _, o, _ in rows], [o.body for _, o, _ in rows],
            list(per_agent), [v[0] for v in per_agent.values()], [v[1] for v in per_agent.values()],
            [v[2] for v in per_agent.values()], s.agent_trip_after, s.agent_probe_min_s, s.agent_probe_max_s,
            [c.workspace_id for c, _, _ in rows], [c.run_id for c, _, _ in rows], [c.agent_id for c, _, _ in rows],
        ), attempts=3, pause_s=0.01)
        health: dict[UUID, Health] = {}
        for r in records:
            schedule = None if r["retry_schedule"] is None else retry.Schedule.of(r["retry_schedule"])
            health[r["agent_id"]] = Health(r["state"] == "unhealthy", schedule)
            if r["changed"]:
                await self._announce(conn, r)
        return health

    async def _announce(self, conn: Any, row: Any) -> None:
        """An agent's circuit opened or closed: log it, alert the workspace; a recovered agent's backlog flows."""
        data = {"agent_id": str(row["agent_id"]), "name": row["name"], "state": row["state"],
                "since": row["since"].isoformat(), "failures": row["failures"], "last_error": row["last_error"],
                "next_probe_at": None if row["next_probe_at"] is None else row["next_probe_at"].isoformat()}
        async with conn.transaction():
            if row["state"] == "unhealthy":
                log.warning("agent is unhealthy: its tasks wait for a probe to succeed",
                            extra={"agent_id": str(row["agent_id"]), "agent": row["name"]})
                await alerts.emit(conn, row["workspace_id"], alerts.AGENT_UNHEALTHY, data)
            else:
                log.info("agent recovered", extra={"agent_id": str(row["agent_id"]), "agent": row["name"]})
                await alerts.emit(conn, row["workspace_id"], alerts.AGENT_RECOVERED, data)
                await conn.execute(Q.notify_send, notify.TASKS, str(row["agent_id"]))

    async def _write_done(self, conn: Any, group: list[Pending]) -> list[tuple[tasks.Claimed, Outcome]]:
        """Write every ``done`` outcome of a group in one statement; returns what needs the one-by-one path.

        A done task the statement did not apply (a repeat, or a lease lost meanwhile) goes one by one too,
        so it is told apart and recorded (LATE_RESULT) exactly like a single report.
        """
        done = [(c, o) for c, o, _, _ in group if o.kind == "done"]
        rest = [(c, o) for c, o, _, _ in group if o.kind != "done"]
        if done:
            applied = {r["id"] for r in await conn.fetch(
                Q.task_succeed_many, [c.id for c, _ in done], [c.lease_token for c, _ in done],
                [o.result for _, o in done], self.holder)}
            metrics.COMPLETIONS.labels("tasks", "succeeded").inc(len(applied))
            rest += [(c, o) for c, o in done if c.id not in applied]
        return rest

    async def _write_rest(self, conn: Any, rest: list[tuple[tasks.Claimed, Outcome]],
                          health: dict[UUID, Health]) -> None:
        """Write the other outcomes one by one, in one transaction; on an error, each in its own."""
        if not rest:
            return
        try:
            async with conn.transaction():
                for claimed, outcome in rest:
                    await self._write(conn, claimed, outcome, health.get(claimed.agent_id))
        except Exception:
            if len(rest) == 1:
                raise
            for claimed, outcome in rest:  # isolate the failing one
                async with conn.transaction():
                    await self._write(conn, claimed, outcome, health.get(claimed.agent_id))

    def _report(self, claimed: tasks.Claimed, outcome: Outcome, health: Health | None) -> tasks.Report | None:
        """The report an outcome makes (None: accepted, the agent reports later).

        A retry waits its schedule's next delay (or the agent's ``Retry-After``); none left, the task fails. While
        the agent is unhealthy the attempt is given back: its tasks wait for the agent, not for their schedule.
        """
        if outcome.kind == "accepted":
            return None
        if outcome.kind == "done":
            return tasks.Report("succeeded", result=outcome.result)
        if outcome.kind == "retry":
            if health is not None and health.unhealthy:
                return tasks.Report("failed", error=outcome.detail, retry_class="transient",
                                    retry_after_s=retry.hinted(outcome.hint, 0.0), refund=True)
            schedule = health.schedule if health is not None and health.schedule else self.settings.retry_schedule
            delay = schedule.delay(claimed.attempt)
            if delay is not None:
                return tasks.Report("failed", error=outcome.detail, retry_class="transient",
                                    retry_after_s=retry.hinted(outcome.hint, delay))
            return tasks.Report("failed", error=outcome.detail, retry_class="exhausted")
        return tasks.Report("failed", error=outcome.detail, retry_class=outcome.retry_class or "permanent")

    async def _write(self, conn: Any, claimed: tasks.Claimed, outcome: Outcome, health: Health | None) -> None:
        if outcome.kind == "cancelled":
            return  # the cancel ended the task and its lease already
        report = self._report(claimed, outcome, health)
        try:
            if report is None:
                await tasks.accept(conn, claimed.id, claimed.lease_token, lease_s=self.settings.task_lease_s,
                                   actor_id=self.holder)
            else:
                await tasks.report(conn, claimed.id, claimed.lease_token, report, actor_type="worker",
                                   actor_id=self.holder)
        except LeaseLost:
            log.info("push result after the lease was lost; recorded, not applied",
                     extra={"task_id": str(claimed.id)})

    async def run(self) -> None:
        """Pushes are started by :meth:`submit`; this only waits for :meth:`stop`."""
        await self._stopped.wait()

    async def stop(self, deadline: float | None = None) -> None:
        """Stop taking pushes; let in-flight ones finish within the deadline, then release their leases."""
        self.stopping = True
        wait_s = self.settings.shutdown_deadline * 0.6 if deadline is None else deadline
        pending = list(self._inflight)
        if pending:
            _, late = await asyncio.wait(pending, timeout=wait_s)
            await self._release(late)
        if self._client is not None:
            await self._client.close()
        self._stopped.set()

    async def _release(self, late: set[asyncio.Task[None]]) -> None:
        claims = [self._inflight[t] for t in late if t in self._inflight]
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        async with self.ctx.pool.acquire() as conn:
            for claimed in claims:
                await tasks.release(conn, claimed.id, claimed.lease_token, holder=self.holder)


class Reservations:
    """Push slots held for the claims of one dispatch transaction (the one-by-one path) until pushed or given back.

    Dispatch asks :meth:`admit` before it claims a task to push at once: a yes holds a slot within the agent's and
    its workspace's shares. After the transaction :meth:`push` starts what was claimed; leaving the ``with`` block
    gives back the slots no push used (the agent had no free slot, or the transaction rolled back).
    """

    def __init__(self, pusher: Pusher) -> None:
        self.pusher = pusher
        self.held: list[UUID] = []

    def __enter__(self) -> Reservations:
        return self

    def __exit__(self, *_exc: object) -> None:
        for agent in self.held:
            self.pusher.unhold(agent)
        self.held.clear()

    def admit(self, workspace: UUID, agent: UUID) -> bool:
        """Hold a slot for one push of ``agent`` of ``workspace`` if the shares allow it now."""
        if not self.pusher.hold(workspace, agent):
            return False
        self.held.append(agent)
        return True

    def push(self, claimed: tasks.Claimed) -> None:
        """Start pushing a task claimed in this transaction, in the slot held for it."""
        held = claimed.agent_id in self.held
        if held:
            self.held.remove(claimed.agent_id)
        self.pusher.submit(claimed, held=held)


class PushWorker(PollingService):
    """Claims due queued tasks of HTTP agents (retries, tasks made elsewhere) and hands them to the pusher."""

    name = "pushes"
    channel = notify.TASKS

    def __init__(self, ctx: Context, *, holder: str, pusher: Pusher, wake: NotifyListener | None = None) -> None:
        # settle: a finished push pokes this loop; coalesce bursts of pokes into one pass.
        super().__init__(interval=ctx.settings.worker_poll_s, wake=wake, settle=0.005)
        self.ctx, self.holder, self.pusher = ctx, holder, pusher
        #: Agents whose claim waits for more free slots (claim_floor), with when they started waiting (monotonic).
        self.waiting: dict[UUID, float] = {}

    async def run_once(self, now: datetime | None = None) -> int:
        """Claim for every agent with due work and a free slot, within its fair share of this process's capacity.

        Least recently served first (workspace, then agent), each up to its share (:mod:`worker.fairshare`), once
        enough of its slots are free (:func:`claim_floor`) or it has waited ``CLAIM_WAIT_S`` for them.
        """
        s = self.ctx.settings
        started = 0
        # Decided once the lookup answered, never cleared while it runs: a push that finishes during the lookup
        # frees its slot after the lookup's snapshot, and must still wake the next pass (it waited for the poll,
        # ~1 s, seen in bench/fairness.py). A notification during the pass keeps it set.
        notices = self.pusher.notices
        shares = self.pusher.shares
        waiting: dict[UUID, float] = {}
        async with self.ctx.pool.acquire() as conn:
            due = await conn.fetch(Q.task_agents_due, 64, now, s.agent_max_concurrency)
            shares.wanting({a["id"]: a["workspace_id"] for a in due})
            budget, turn = shares.budget(), shares.turn
            # Tasks are waiting (for a slot, or for this process's capacity): finished pushes look again.
            self.pusher.backlog = bool(due) or self.pusher.notices != notices
            clock = time.monotonic()
            for agent in sorted(due, key=lambda a: (not a["has_free"], shares.order(a["id"]))):
                if self.pusher.capacity() <= 0 or not agent["has_free"]:
                    break
                async with self.pusher.claiming:
                    if shares.turn != turn:  # the take started pushes meanwhile: the budget allows too much
                        budget, turn = shares.budget(), shares.turn
                    free, room = self.pusher.capacity(), budget.room(agent["id"], agent["workspace_id"])
                    if room <= 0 or free <= 0:
                        continue
                    limit = min(free, room, CLAIM_BATCH)
                    since = self.waiting.get(agent["id"], clock)
                    if agent["free"] < min(limit, claim_floor(agent["cap"])) and clock - since < CLAIM_WAIT_S:
                        waiting[agent["id"]] = since
                        continue
                    lease = tasks.push_lease_s(agent["timeout_s"], s.push_timeout_cap_s, s.push_lease_margin_s)
                    won = await tasks.claim(conn, agent_id=agent["id"], limit=limit, lease_s=lease,
                                            holder=self.holder, actor_type="worker", now=now,
                                            cap=s.agent_max_concurrency)
                    for claimed in won:
                        self.pusher.submit(claimed)
                    started += len(won)
                    # These starts are spent from the budget here, so it still holds for the next agent.
                    budget.spend(agent["id"], agent["workspace_id"], len(won))
                    turn = shares.turn
        self.waiting = waiting
        return started

    async def _idle(self) -> None:
        """Wait for work; while an agent waits for more free slots, only CLAIM_GATHER_S (pokes are not needed)."""
        if not self.waiting:
            await super()._idle()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), CLAIM_GATHER_S)
