"""The failover run: the primary is SIGKILLed mid-load and its standby promoted; no 2xx may be lost.

``run_failover(FailoverConfig(...))`` builds a primary and a streaming standby (``tests/chaos/replicas.py``,
synchronous by default), runs one gateway, one worker and one scheduler as separate ``hookgate`` processes
on the multi-host URL ``postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/hookgate?target_session_attrs=read-write``,
and drives real traffic: webhook POSTs with an ``Idempotency-Key`` (an event answered 503 or never answered
is sent again until answered, as providers do; a tenth of the accepted ones are sent again as provider
retries), a local HTTP agent answering every push 200, one pull runtime long-polling the gateway, and cron
triggers whose occurrence falls due while there is no primary (the scheduler's clock is offset for that:
``HOOKGATE_SCHEDULER_CLOCK_OFFSET_S``). ``lead_s`` after the roles start (the world is made and the load
runs meanwhile) every process of the primary is SIGKILLed, its WAL sender stopped ``stall_s`` before (the
standby falls behind: asynchronous, the primary acknowledges commits the standby never gets; synchronous,
commits wait); ``promote_after_s`` after the kill the standby is promoted, and the load goes on for
``after_promote_s``.

Checked on the new primary once nothing is in flight: every 2xx names a stored delivery and every 2xx of
one event the same one, one run per delivery, every run completed, one task per run pushed under one id,
each cron occurrence fired exactly once. Measured: kill → first 2xx of a request sent after the kill (and
promotion → that 2xx), promotion → each role's LISTEN connection open on the new primary, and the
durability line each process logged at start. Used by ``tests/chaos/test_failover.py`` and
``bench/chaos.py --scenario failover``; nothing is left behind (servers stopped, temp dirs removed).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from tests.chaos import checks
from tests.chaos.agents import HttpAgent, PullRuntimes
from tests.chaos.cluster import FAST_RECOVERY
from tests.chaos.replicas import Replicas
from tests.processes import ROOT, Proc, Spawner, free_port, stop_all

SECRET_KEY = base64.b64encode(b"failover-secret-key-of-32-bytes!").decode()
DATABASE = "hookgate"
#: The chaos run's short leases and retries (work cut off by the kill is taken over in seconds, not minutes);
#: everything that decides how fast a role reconnects keeps its default (the scheduler's longest tick too).
LEASES = {k: v for k, v in FAST_RECOVERY.items() if k not in ("HOOKGATE_SCHEDULER_MAX_TICK_S", "HOOKGATE_LOG_LEVEL")}
#: The query by which a role's listening connection is found on a server: its application_name names its pid.
#: (A worker's adds " deliveries": the first three words name the process.)
LISTENERS = ("SELECT array_to_string((string_to_array(application_name, ' '))[1:3], ' ') AS application_name "
             "FROM pg_stat_activity WHERE application_name LIKE 'hookgate listen %'")


@dataclass(frozen=True)
class FailoverConfig:
    """Shape of a run. Defaults: the CI-sized run (30-45 s in all)."""

    synchronous: bool = True  # False: asynchronous streaming (acknowledged commits can be lost)
    rate: float = 40.0  # new webhook events per second
    lead_s: float = 18.0  # from the roles' start to the kill: their start, the world, then load
    promote_after_s: float = 1.0  # no primary at all for this long
    stall_s: float = 1.0  # the standby receives no WAL for this long before the kill (0: it never lags)
    after_promote_s: float = 5.0
    schedules: int = 2  # daily cron triggers, their occurrence due while no primary exists
    settle_timeout_s: float = 60.0
    seed: int | None = None


@dataclass
class FailoverReport:
    """What happened and what was violated (empty ``violations`` = the run passed)."""

    config: FailoverConfig
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)  # process log tails, kept when the run failed
    seconds: float = 0.0
    recovery_s: float | None = None  # promotion -> first 2xx of a request sent after the kill
    listen_back_s: dict[str, float | None] = field(default_factory=dict)  # promotion -> each role's LISTEN open
    durability: dict[str, list[str]] = field(default_factory=dict)  # each role's durability lines
    outage_answers: int = 0  # 503s and broken connections: the kill was felt mid-load
    lagged_2xx: int | None = None  # 2xx for requests sent after the WAL sender stopped, before the kill
    work_dirs: list[Path] = field(default_factory=list)  # the servers' and the processes' (gone after the run)

    @property
    def ok(self) -> bool:
        """True when every invariant held."""
        return not self.violations

    def details(self) -> str:
        """The table and, for a failed run, the tails of the process and server logs."""
        return "\n".join([self.table(), *(f"===== {name}\n{tail}" for name, tail in self.logs.items())])

    def table(self) -> str:
        """The summary printed at the end of a run."""
        width = max((len(k) for k in self.figures), default=0) + 2
        lines = [f"{k:<{width}}{v}" for k, v in self.figures.items()]
        lines += [f"VIOLATION {v}" for v in self.violations[:50]]
        lines.append(f"{'result':<{width}}{'PASS' if self.ok else 'FAIL'} in {self.seconds:.0f} s")
        return "\n".join(lines)


@dataclass
class WebhookLoad:
    """New events at ``rate`` per second to one generic webhook URL, each sent until it gets a final answer."""

    url: str
    rate: float
    rng: random.Random
    statuses: Counter[int | str] = field(default_factory=Counter)
    delivered: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # event -> 2xx delivery ids
    answered: list[tuple[float, float]] = field(default_factory=list)  # (sent, answered) of every 2xx
    forged_2xx: int = 0  # (none are forged here; ``checks.every_2xx_stored`` reads it)
    events: int = 0
    unanswered: set[str] = field(default_factory=set)
    stopping: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)  # one sender per event

    async def run(self, client: httpx.AsyncClient) -> None:
        """Start one sender per new event, paced, until :attr:`stopping`."""
        start = time.monotonic()
        while not self.stopping:
            await asyncio.sleep(max(0.0, start + self.events / self.rate - time.monotonic()))
            self.events += 1
            key = f"evt-{uuid.uuid4().hex}"
            self.unanswered.add(key)
            self.tasks.append(asyncio.create_task(self._event(client, key)))

    async def settle(self, deadline_s: float) -> None:
        """Wait until every event was answered 2xx (or ``deadline_s`` passed)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self.tasks), deadline_s)

    async def _event(self, client: httpx.AsyncClient, key: str) -> None:
        while not await self._send(client, key):
            await asyncio.sleep(0.5)  # a provider retries a 503 or a broken connection
        self.unanswered.discard(key)
        if self.rng.random() < 0.1:  # a provider retry of an accepted event: must be the same delivery
            await asyncio.sleep(self.rng.uniform(0.2, 2.0))
            while not await self._send(client, key):
                await asyncio.sleep(0.5)

    def _request(self, key: str) -> tuple[str, bytes, dict[str, str]]:
        """Where and what one event is sent: its URL, body and headers."""
        body = json.dumps({"event": "order.paid", "key": key}).encode()
        return self.url, body, {"content-type": "application/json", "idempotency-key": key}

    async def _send(self, client: httpx.AsyncClient, key: str) -> bool:
        sent = time.monotonic()
        url, body, headers = self._request(key)
        try:
            answer = await client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            self.statuses[type(exc).__name__] += 1
            return False
        self.statuses[answer.status_code] += 1
        if 200 <= answer.status_code < 300:
            self.delivered[key].add(str(answer.json().get("delivery_id")))
            self.answered.append((sent, time.monotonic()))
            return True
        return answer.status_code < 500  # a 4xx is final (and counted); a 5xx is sent again


@dataclass
class World:
    """What the run made through the admin API."""

    hook_url: str
    push_secret: str
    http_agent_id: str
    runtime_token: str
    first_fire_at: float  # epoch seconds of the cron triggers' first occurrence
    schedule_triggers: list[str]


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(path, json=body)
    if answer.is_error:
        raise RuntimeError(f"POST {path} {body}: {answer.status_code} {answer.text}")
    return dict(answer.json())


def build_world(gateway: str, api_key: str, agent_url: str, schedules: int, cron: str) -> World:
    """An HTTP agent with a webhook autopilot, a pull agent with ``schedules`` triggers on ``cron``, as a user would."""
    with httpx.Client(base_url=gateway, headers={"authorization": f"Bearer {api_key}"}, timeout=30) as client:
        http = _post(client, "/v1/agents", {"name": "failover-http", "max_concurrency": 64,
                                            "runtime": {"kind": "http", "url": agent_url, "timeout_s": 3}})
        pull = _post(client, "/v1/agents", {"name": "failover-pull", "runtime": {"kind": "pull"}})
        ap = _post(client, "/v1/autopilots", {"title": "failover hooks", "instructions": "failover",
                                              "assignee": {"type": "agent", "id": http["id"]},
                                              "execution_mode": "run_only"})
        hook = _post(client, f"/v1/autopilots/{ap['id']}/triggers",
                     {"kind": "webhook", "provider": "generic", "rate_limit_per_minute": 1_000_000})
        daily = _post(client, "/v1/autopilots", {"title": "failover cron", "instructions": "once a day",
                                                 "assignee": {"type": "agent", "id": pull["id"]}})
        triggers = [_post(client, f"/v1/autopilots/{daily['id']}/triggers",
                          {"kind": "schedule", "cron": cron, "overlap_policy": "allow"})
                    for _ in range(schedules)]
    first = min(datetime.fromisoformat(t["next_fire_at"]).timestamp() for t in triggers)
    return World(hook["url"], http["signing_secret"], http["id"], pull["runtime_token"], first,
                  [t["id"] for t in triggers])


def run_failover(config: FailoverConfig) -> FailoverReport:
    """Run one failover experiment end to end (blocking); both servers and every temp dir are gone after."""
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="hookgate-failover-run-"))
    spawner: Spawner | None = None
    report = FailoverReport(config, work_dirs=[work])
    try:
        with Replicas(synchronous=config.synchronous) as pair:
            report.work_dirs.append(pair.base)
            asyncio.run(_sql(pair.direct_url("primary"), f'CREATE DATABASE "{DATABASE}"'))
            port = free_port()
            env = {**LEASES, "HOOKGATE_LOG_LEVEL": "info", "HOOKGATE_SECRET_KEY": SECRET_KEY,
                   "HOOKGATE_AGENT_ALLOW_CIDRS": "127.0.0.0/8,::1/128", "HOOKGATE_DATABASE_URL": pair.url(DATABASE)}
            spawner = Spawner(env, work)
            _cli(spawner, "migrate")
            # The cron occurrence (a daily one, a minute or two ahead) is due, on the scheduler's clock, halfway
            # through the outage, which starts lead_s from now.
            fire_at = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=2)
            due = time.time() + config.lead_s + config.promote_after_s / 2
            offset = {"HOOKGATE_SCHEDULER_CLOCK_OFFSET_S": f"{fire_at.timestamp() - due:.3f}"}
            roles = {"gateway": spawner.start("gateway", "--port", str(port),
                                              extra_env={"HOOKGATE_PUBLIC_URL": f"http://127.0.0.1:{port}"}),
                     "worker": spawner.start("worker"), "scheduler": spawner.start("scheduler", extra_env=offset)}
            roles["gateway"].port = port
            try:
                roles["gateway"].wait_ready(60)
                boot = json.loads(_cli(spawner, "bootstrap", "--workspace", "failover", "--json"))
                asyncio.run(_experiment(pair, roles, boot["api_key"], config, report, fire_at, due))
            finally:
                stop_all(roles.values(), 20)
                report.durability = _durability(roles)
                report.figures |= {f"{role} logged": lines[0] if len(lines) == 1 else f"{len(lines)} durability lines"
                                   for role, lines in report.durability.items()}
                if not report.ok:
                    report.logs = {name: proc.output()[-3000:] for name, proc in roles.items()}
                    report.logs |= {f"postgres {w}": pair.log(w)[-2000:] for w in ("primary", "standby")}
    finally:
        if spawner is not None:
            spawner.kill_all()
        shutil.rmtree(work, ignore_errors=True)
    report.seconds = time.monotonic() - started
    return report


async def _experiment(pair: Replicas, roles: dict[str, Proc], api_key: str, config: FailoverConfig,
                      report: FailoverReport, fire_at: datetime, due: float) -> None:
    rng = random.Random(config.seed)
    agent = HttpAgent(misbehave=False)
    cron = f"{fire_at.minute} {fire_at.hour} * * *"
    made = build_world(roles["gateway"].url, api_key, await agent.start(), config.schedules, cron)
    if made.first_fire_at != fire_at.timestamp():
        raise RuntimeError(f"the cron triggers fire first at {made.first_fire_at}, not {fire_at}")
    agent.secret = made.push_secret
    runtimes = PullRuntimes([roles["gateway"].url], made.runtime_token, count=1, vanish=0.0, rng=rng)
    load = WebhookLoad(made.hook_url, config.rate, rng)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    running: list[asyncio.Task[Any]] = []
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:
        try:
            background = [asyncio.create_task(load.run(client)), asyncio.create_task(runtimes.run())]
            running += background
            # On a machine so loaded that the scheduler is not up by then, the kill waits for it and the occurrence
            # falls due before the kill (the figure shows it), which proves less.
            await _listening(pair, roles["scheduler"], config.lead_s + 30)
            await asyncio.sleep(max(0.0, due - config.promote_after_s / 2 - config.stall_s - time.time()))
            if config.stall_s > 0:
                await asyncio.to_thread(pair.stall_replication)
                stalled = time.monotonic()
                await asyncio.sleep(config.stall_s)
            killed = time.time()
            await asyncio.to_thread(pair.kill_primary)
            report.figures["cron occurrence due after the kill"] = f"{due - killed:+.1f} s"
            if config.stall_s > 0:  # synchronous: none can be (no commit made after the stall is acknowledged)
                report.lagged_2xx = sum(sent >= stalled and answered <= (pair.killed_at or 0)
                                        for sent, answered in load.answered)
                report.figures["2xx for requests sent while the standby lagged"] = report.lagged_2xx
            await asyncio.sleep(config.promote_after_s)
            await asyncio.to_thread(pair.promote)
            listening = asyncio.create_task(_listeners_back(pair, roles))
            running.append(listening)
            await asyncio.sleep(config.after_promote_s)
            load.stopping = True
            await background[0]
            await load.settle(config.settle_timeout_s)
            conn = await asyncpg.connect(pair.direct_url("standby", DATABASE))
            try:
                waited = await checks.wait_quiescent(conn, config.settle_timeout_s, 0.2)
                for found in (await checks.every_2xx_stored(conn, load), await checks.one_run_per_delivery(conn),
                              await checks.runs_terminal(conn), await checks.runs_not_failed(conn),
                              await checks.occurrences_once(conn), await checks.tasks_once(conn, agent, runtimes),
                              await checks.pushes_acknowledged(conn, agent, made.http_agent_id),
                              await checks.no_dead_leases(conn, []),
                              await _schedules_fired(conn, made.schedule_triggers)):
                    report.violations += found
                db = await checks.figures(conn)
            finally:
                await conn.close()
            runtimes.stopping = True
            await background[1]
            back = await listening
        finally:  # a run that failed half-way leaves no sender behind the closed client
            load.stopping = runtimes.stopping = True
            running = [t for t in (*running, *load.tasks) if not t.done()]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            await agent.stop()
    if load.unanswered:
        report.violations.append(f"{len(load.unanswered)} events never got a 2xx")
    report.figures |= _figures(pair, load, agent, runtimes, db, waited, back, config)
    report.recovery_s, report.listen_back_s = report.figures["promotion -> first 2xx"], back
    report.outage_answers = sum(n for s, n in load.statuses.items() if not (isinstance(s, int) and s < 500))
    if report.recovery_s is None or report.recovery_s > 10.0:
        report.violations.append(f"no 2xx within 10 s of the promotion ({report.recovery_s})")


def _figures(pair: Replicas, load: WebhookLoad, agent: HttpAgent, runtimes: PullRuntimes, db: dict[str, Any],
             waited: float, back: dict[str, float | None], config: FailoverConfig) -> dict[str, Any]:
    assert pair.killed_at is not None and pair.promoted_at is not None
    after_kill = [answered for sent, answered in load.answered if sent >= pair.killed_at]
    first = min(after_kill, default=None)
    ok = sum(n for s, n in load.statuses.items() if isinstance(s, int) and 200 <= s < 300)
    shown = {role: "not back" if s is None else f"{s:.1f} s" for role, s in back.items()}
    return {
        "replication": "synchronous" if config.synchronous else "asynchronous",
        "events / requests": f"{load.events} / {sum(load.statuses.values())}",
        "answers": ", ".join(f"{s}: {n}" for s, n in sorted(load.statuses.items(), key=str)),
        "2xx / 503 / connection errors": f"{ok} / {load.statuses.get(503, 0)} / "
                                         f"{sum(n for s, n in load.statuses.items() if isinstance(s, str))}",
        "deliveries / runs / completed": f"{db['deliveries']} / {db['runs']} / {db['runs_completed']}",
        "schedule runs": db["schedule_runs"], "http pushes": agent.pushes, "pull claims": runtimes.claims,
        "primary down before promotion": f"{pair.promoted_at - pair.killed_at:.1f} s",
        "kill -> first 2xx": None if first is None else round(first - pair.killed_at, 2),
        "promotion -> first 2xx": None if first is None else round(first - pair.promoted_at, 2),
        "promotion -> LISTEN back": ", ".join(f"{role} {s}" for role, s in shown.items()),
        "quiescence after load": f"{waited:.1f} s",
    }


async def _listeners_back(pair: Replicas, roles: dict[str, Proc], timeout: float = 30.0) -> dict[str, float | None]:
    """Seconds from the promotion until each role's LISTEN connection is open on the new primary."""
    assert pair.promoted_at is not None
    pids = {f"hookgate listen {proc.popen.pid}": role for role, proc in roles.items()}
    back: dict[str, float | None] = dict.fromkeys(roles)
    end = time.monotonic() + timeout
    while time.monotonic() < end and None in back.values():
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            conn = await asyncpg.connect(pair.direct_url("standby", DATABASE))
            try:
                for row in await conn.fetch(LISTENERS):
                    role = pids.get(row["application_name"])
                    if role is not None and back[role] is None:
                        back[role] = time.monotonic() - pair.promoted_at
            finally:
                await conn.close()
        await asyncio.sleep(0.1)
    return back


async def _listening(pair: Replicas, proc: Proc, timeout: float) -> None:
    """Wait until ``proc``'s LISTEN connection is open on the primary (the process is up and running)."""
    name = f"hookgate listen {proc.popen.pid}"
    end = time.monotonic() + timeout
    conn = await asyncpg.connect(pair.direct_url("primary", DATABASE))
    try:
        while name not in {r["application_name"] for r in await conn.fetch(LISTENERS)}:
            if time.monotonic() > end or proc.popen.poll() is not None:
                raise RuntimeError(f"{name} never listened:\n{proc.output()[-3000:]}")
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def _schedules_fired(conn: asyncpg.Connection, triggers: list[str]) -> list[str]:
    """Each cron trigger fired its occurrence (due during the outage): one run each (``occurrences_once``: not 2)."""
    rows = await conn.fetch("SELECT trigger_id::text, count(*) FROM autopilot_run WHERE trigger_id::text = ANY($1) "
                            "GROUP BY 1", triggers)
    fired = {r["trigger_id"]: r["count"] for r in rows}
    return [f"schedule trigger {t} never fired (lost)" for t in triggers if not fired.get(t)]


def _durability(roles: dict[str, Proc]) -> dict[str, list[str]]:
    """The durability lines each role logged (one at start is expected)."""
    return {role: re.findall(r'"msg": ?"(durability: [^"]*)"', proc.output()) for role, proc in roles.items()}


def _cli(spawner: Spawner, *args: str) -> str:
    env = {**os.environ, **spawner.env, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "hookgate.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"hookgate {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout


async def _sql(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()
