"""Fairness across real processes: a flooded trigger beside a quiet one, hanging agents beside a fast one.

The scenarios run on one database, against one ``hookgate gateway`` and ``workers`` ``hookgate worker``
processes (default dispatch settings), with every agent in one separate process (``bench/agent.py``, whose
``/hold/<ms>/<label>`` paths hold each push ``ms`` milliseconds and count pushes per label):

(a) **flood**: one workspace, one HTTP agent with ``concurrency`` slots whose pushes each take ``push_ms`` at the
    agent, and two autopilots assigned to it, each with one webhook trigger. ``flood`` deliveries of the noisy
    trigger are inserted at once as ingress stores them (a queued delivery with its admitted run and the NOTIFY,
    one transaction: :func:`insert_backlog`, which ``bench/dispatch.py`` drains too; they carry no ``t0``, so
    the agent counts them as untimed). Meanwhile one webhook every ``1 / quiet_rate`` s is POSTed to the quiet trigger
    through the gateway, until the flood has reached the agent. Measured: POST -> agent receipt of each quiet
    run, and how many flood pushes were still to come at that moment.
(b) **hang**: workspace A's agent holds every push ``hang_s`` seconds (its timeout is above that, so each push
    keeps its slot the whole time; ``hang_concurrency`` slots) and ``hang_runs`` deliveries are inserted for it.
    Once its pushes hang, workspace B POSTs ``b_rate`` webhooks a second for ``hang_measure_s`` seconds to its
    own fast agent (``push_ms``, ``concurrency`` slots). Measured: POST -> agent receipt of B's runs, and how
    many of A's pushes the agent was holding at each receipt.

(c) **many new agents**: when (b) is over (A's runs cancelled, which aborts its held pushes), workspace C gets
    ``many_agents`` HTTP agents the workers have never pushed to, each holding every push ``hang_s`` seconds
    (``many_concurrency`` slots each, together more than all the workers' push slots), with ``many_runs`` runs
    queued for each. Once C's pushes hang, B POSTs as in (b). A worker process leaves the last eighth of its push
    slots to other workspaces whatever the number of a workspace's agents, new or known: measured, B's POST ->
    agent receipt latency, and how many of C's pushes the agent held at each receipt.

Each measurement is first taken unloaded (the same POSTs for ``baseline_s`` seconds, nothing else queued), in
the same run. The two autopilots of (a) matter: an agent's queue is shared round-robin across the autopilots
that feed it, while the tasks of one autopilot go oldest first (docs/DISPATCH.md, fairness).
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from autopilot import agents, lifecycle, rules, workspaces
from hookgate import database, notify
from hookgate.crypto import Keyring
from sql import Q
from tests.processes import ROOT, Spawner, free_port, wait_listeners

#: The agents are a local process: loopback is allowed explicitly, as an operator would.
AGENT_ALLOW = "127.0.0.0/8,::1/128"


@dataclass(frozen=True)
class Config:
    """Sizes and durations of the scenarios (the defaults are the bench's targets' shape; ``many_agents`` 0: no (c))."""

    flood: int = 10_000
    quiet_rate: float = 1.0
    push_ms: float = 5.0
    concurrency: int = 4
    hang_runs: int = 1_000
    hang_s: float = 30.0
    hang_concurrency: int = 64
    b_rate: float = 20.0
    hang_measure_s: float = 40.0
    baseline_s: float = 10.0
    workers: int = 2
    many_agents: int = 10
    many_runs: int = 100
    many_concurrency: int = 64
    #: Give up waiting for the flood to reach the agent after this long (the quiet POSTs stop then too).
    flood_timeout_s: float = 300.0
    #: Stop the quiet POSTs of (a) after this many, without waiting for the flood to pass (0: wait for it).
    quiet_max: int = 0


@dataclass
class Phase:
    """The POST -> agent latencies of one measured stream, with what the other tenant was doing at each."""

    name: str
    sent: int
    latencies_ms: list[float] = field(default_factory=list)
    #: Per received sample: flood pushes still to come (flood), or A's pushes held at the agent (hang).
    pressure: list[int] = field(default_factory=list)

    @property
    def lost(self) -> int:
        """POSTs answered 200 whose push never reached the agent within the wait."""
        return self.sent - len(self.latencies_ms)

    def _all(self) -> list[float]:
        """Every POST's latency, a lost one counted as infinite (slower than any that arrived)."""
        return sorted(self.latencies_ms + [float("inf")] * max(0, self.lost))

    def p50(self) -> float:
        """Median latency, ms (inf without samples)."""
        values = self._all()
        return statistics.median(values) if values else float("inf")

    def pct(self, q: float) -> float:
        """The ``q`` quantile, ms, nearest rank (inf without samples)."""
        values = self._all()
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("inf")

    def p99(self) -> float:
        """99th percentile, ms."""
        return self.pct(0.99)

    def figures(self) -> dict[str, Any]:
        """The phase as printable figures."""
        out: dict[str, Any] = {"samples": len(self.latencies_ms), "lost": self.lost,
                               "p50_ms": round(self.p50(), 2), "p90_ms": round(self.pct(0.9), 2),
                               "p99_ms": round(self.p99(), 2),
                               "max_ms": round(max(self.latencies_ms, default=float("inf")), 2)}
        if self.pressure:
            out |= {"pressure_min": min(self.pressure), "pressure_median": statistics.median(self.pressure),
                    "pressure_max": max(self.pressure)}
        return out


@dataclass
class Report:
    """The scenarios' phases and the flood's own pace."""

    quiet_base: Phase
    quiet_flood: Phase
    b_base: Phase
    b_hang: Phase
    flood_s: float
    flood_done: bool
    hang_held: int
    #: (c): B during C's many new hanging agents, and how many of C's pushes were held when B began (None: not run).
    b_many: Phase | None = None
    many_held: int = 0


@dataclass
class Tenant:
    """One trigger's webhook URL token and the agent label its pushes arrive under."""

    token: str
    label: str
    autopilot: asyncpg.Record
    trigger: asyncpg.Record


async def tenant(conn: Any, keyring: Keyring, boot: Any, agent_id: Any, title: str, label: str) -> Tenant:
    """A run_only autopilot of the agent and its (unpaced) webhook trigger, made by the workspace ``boot``'s owner."""
    ap, _ = await rules.create_autopilot(conn, workspace_id=boot.workspace_id, creator_id=boot.member_id,
                                         title=title, assignee_type="agent", assignee_id=agent_id,
                                         execution_mode="run_only")
    trigger, token = await rules.create_webhook_trigger(conn, keyring, autopilot=ap,
                                                        publisher=rules.Publisher.member(boot.member_id),
                                                        rate_limit_per_minute=1_000_000)
    return Tenant(token, label, ap, trigger)


@dataclass
class World:
    """The triggers of the scenarios."""

    noisy: Tenant
    quiet: Tenant
    hanging: Tenant
    fast: Tenant
    #: (c): one trigger per agent of workspace C.
    many: list[Tenant] = field(default_factory=list)


async def make_world(conn: Any, keyring: Keyring, agent_base: str, cfg: Config) -> World:
    """Workspaces, agents, autopilots and triggers of the scenarios."""
    flood = await workspaces.bootstrap(conn, "fair-flood")
    shared = await agents.create_http_agent(conn, keyring, workspace_id=flood.workspace_id, owner_id=flood.member_id,
                                            name="shared", url=f"{agent_base}/hold/{cfg.push_ms:g}/shared",
                                            max_concurrency=cfg.concurrency)
    a = await workspaces.bootstrap(conn, "fair-a")
    hanging = await agents.create_http_agent(conn, keyring, workspace_id=a.workspace_id, owner_id=a.member_id,
                                             name="hanging", url=f"{agent_base}/hold/{cfg.hang_s * 1000:g}/hang",
                                             timeout_s=min(300.0, cfg.hang_s + 30),
                                             max_concurrency=cfg.hang_concurrency)
    b = await workspaces.bootstrap(conn, "fair-b")
    fast = await agents.create_http_agent(conn, keyring, workspace_id=b.workspace_id, owner_id=b.member_id,
                                          name="fast", url=f"{agent_base}/hold/{cfg.push_ms:g}/fast",
                                          max_concurrency=cfg.concurrency)
    c = await workspaces.bootstrap(conn, "fair-c")
    many = []
    for i in range(cfg.many_agents):
        agent = await agents.create_http_agent(conn, keyring, workspace_id=c.workspace_id, owner_id=c.member_id,
                                               name=f"many-{i}", url=f"{agent_base}/hold/{cfg.hang_s * 1000:g}/many",
                                               timeout_s=min(300.0, cfg.hang_s + 30),
                                               max_concurrency=cfg.many_concurrency)
        many.append(await tenant(conn, keyring, c, agent.row["id"], f"many-{i}", "many"))
    return World(noisy=await tenant(conn, keyring, flood, shared.row["id"], "noisy", "shared"),
                 quiet=await tenant(conn, keyring, flood, shared.row["id"], "quiet", "shared"),
                 hanging=await tenant(conn, keyring, a, hanging.row["id"], "hanging", "hang"),
                 fast=await tenant(conn, keyring, b, fast.row["id"], "fast", "fast"), many=many)


_INSERT_DELIVERIES = """
WITH d AS (
    INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, provider, event, envelope, signature_status)
    SELECT $1, $2, $3, 'generic', 'backlog', jsonb_build_object('event', 'backlog', 'payload',
           jsonb_build_object('n', g, 't0', $5::float8)), 'valid'
    FROM generate_series(1, $4) g
    RETURNING id, envelope
)
INSERT INTO autopilot_run (workspace_id, autopilot_id, trigger_id, webhook_delivery_id, source, rule_version_id,
                           payload, accountable_id)
SELECT $1, $3, $2, d.id, 'webhook', $6, d.envelope, $7 FROM d
RETURNING webhook_delivery_id
"""
# A data-modifying CTE's rows are invisible to its own statement: link runs to deliveries in a second one, by key
# ($1 = the deliveries just inserted), so it costs the same however many queued deliveries wait.
_LINK_RUNS = """
UPDATE webhook_delivery w SET run_id = r.id
FROM autopilot_run r WHERE w.id = ANY ($1::uuid[]) AND r.webhook_delivery_id = w.id
"""


async def insert_backlog(conn: Any, autopilot: asyncpg.Record, trigger: asyncpg.Record, count: int,
                         t0: float | None = None) -> None:
    """``count`` queued deliveries with admitted runs (what ingress stores) and the wake-up, in one commit.

    With ``t0`` (a ``time.time()``) in their payloads the agent times their pushes; without, it counts them untimed.
    """
    version = await conn.fetchval("SELECT id FROM autopilot_rule_version WHERE autopilot_id = $1 "
                                  "ORDER BY version DESC LIMIT 1", autopilot["id"])
    async with conn.transaction():
        made = await conn.fetch(_INSERT_DELIVERIES, autopilot["workspace_id"], trigger["id"], autopilot["id"], count,
                                t0, version, trigger["published_by_id"])
        ids = [r[0] for r in made]
        await conn.execute(_LINK_RUNS, ids)
        # As ingress announces them: by id, or "look at the queue" for more than one notice names.
        await conn.execute(Q.notify_send, notify.DELIVERIES, notify.name_deliveries(ids))


class AgentStats:
    """The agent process's counters over HTTP."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http, self.base = http, base

    async def read(self) -> dict[str, Any]:
        """``GET /stats``."""
        async with self.http.get(f"{self.base}/stats") as r:
            return dict(await r.json())

    async def reset(self) -> None:
        """Forget the timed samples (the per-label counters stay)."""
        async with self.http.delete(f"{self.base}/stats") as r:
            await r.read()

    async def label(self, label: str, counter: str) -> int:
        """One per-label counter (0 before the label's first push)."""
        return int((await self.read())["labels"].get(label, {}).get(counter, 0))


async def post_steady(http: aiohttp.ClientSession, gateway: str, token: str, rate: float,
                      go_on: Callable[[int, float], Awaitable[bool]], tag: str) -> int:
    """POST to the webhook ``token`` every ``1/rate`` s while ``go_on(sent, elapsed)``; returns the count sent.

    Each body carries ``t0`` (``time.time()`` just before the POST), which the agent turns into the latency.
    """
    start, sent = time.perf_counter(), 0
    while await go_on(sent, time.perf_counter() - start):
        delay = start + sent / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        body = json.dumps({"event": "fair", "n": sent, "t0": time.time()})
        async with http.post(f"{gateway}/hooks/{token}", data=body,
                             headers={"content-type": "application/json", "idempotency-key": f"{tag}-{sent}"}) as r:
            if r.status != 200:
                raise RuntimeError(f"ingress answered {r.status}: {await r.text()}")
        sent += 1
    return sent


async def collect(stats: AgentStats, phase: Phase, label: str, pressure: Callable[[dict[str, Any]], int] | None,
                  wait_s: float) -> Phase:
    """Wait up to ``wait_s`` for the phase's pushes at the agent, take their samples, reset the samples."""
    deadline = time.monotonic() + wait_s
    while True:
        timed = [t for t in (await stats.read())["timed"] if t["label"] == label]
        if len(timed) >= phase.sent or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    phase.latencies_ms = [t["ms"] for t in timed]
    phase.pressure = [pressure(t) for t in timed] if pressure else []
    await stats.reset()
    return phase


async def flood_scenario(conn: Any, http: aiohttp.ClientSession, stats: AgentStats, gateway: str, w: World,
                         cfg: Config) -> tuple[Phase, Phase, float, bool]:
    """(a): quiet POSTs unloaded, then while ``cfg.flood`` noisy deliveries go through the same agent."""
    until = cfg.baseline_s

    async def baseline_on(sent: int, elapsed: float) -> bool:
        return elapsed < until

    base = Phase("quiet, unloaded", await post_steady(http, gateway, w.quiet.token, cfg.quiet_rate, baseline_on, "qb"))
    await collect(stats, base, "shared", None, 10)
    first = await stats.label("shared", "untimed")
    target = first + cfg.flood
    done = False
    start = time.perf_counter()
    await insert_backlog(conn, w.noisy.autopilot, w.noisy.trigger, cfg.flood)

    async def flooding(sent: int, elapsed: float) -> bool:
        nonlocal done
        done = await stats.label("shared", "untimed") >= target
        return not done and elapsed < cfg.flood_timeout_s and not (cfg.quiet_max and sent >= cfg.quiet_max)

    loaded = Phase("quiet, during the flood",
                   await post_steady(http, gateway, w.quiet.token, cfg.quiet_rate, flooding, "qf"))
    while not done and not cfg.quiet_max and time.perf_counter() - start < cfg.flood_timeout_s:
        done = await stats.label("shared", "untimed") >= target
        await asyncio.sleep(0.1)
    flood_s = time.perf_counter() - start
    await collect(stats, loaded, "shared", lambda t: target - int(t["untimed"].get("shared", 0)), 30)
    return base, loaded, flood_s, done


async def hang_scenario(conn: Any, http: aiohttp.ClientSession, stats: AgentStats, gateway: str, w: World,
                        cfg: Config) -> tuple[Phase, Phase, int]:
    """(b): B's POSTs unloaded, then while A's agent holds its pushes ``cfg.hang_s`` each."""
    async def baseline_on(sent: int, elapsed: float) -> bool:
        return elapsed < cfg.baseline_s

    base = Phase("B, unloaded", await post_steady(http, gateway, w.fast.token, cfg.b_rate, baseline_on, "bb"))
    await collect(stats, base, "fast", None, 10)
    await insert_backlog(conn, w.hanging.autopilot, w.hanging.trigger, cfg.hang_runs)
    want, deadline = min(cfg.hang_concurrency, cfg.hang_runs), time.monotonic() + min(30.0, cfg.hang_s)
    while (held := await stats.label("hang", "inflight")) < want and time.monotonic() < deadline:
        await asyncio.sleep(0.1)

    async def hanging_on(sent: int, elapsed: float) -> bool:
        return elapsed < cfg.hang_measure_s

    loaded = Phase("B, during A's hang", await post_steady(http, gateway, w.fast.token, cfg.b_rate, hanging_on, "bh"))
    await collect(stats, loaded, "fast", lambda t: int(t["inflight"].get("hang", 0)), 30)
    return base, loaded, held


async def cancel_runs(conn: Any, autopilot: asyncpg.Record) -> int:
    """End a scenario's load: cancel the autopilot's unfinished tasks (held pushes are aborted); returns how many."""
    runs = await conn.fetch("SELECT DISTINCT run_id FROM agent_task WHERE autopilot_id = $1 "
                            "AND status IN ('queued', 'running')", autopilot["id"])
    async with conn.transaction():
        for r in runs:
            await lifecycle.cancel_tasks(conn, r["run_id"], "the scenario is over", autopilot["workspace_id"])
    return len(runs)


async def many_scenario(conn: Any, http: aiohttp.ClientSession, stats: AgentStats, gateway: str, w: World,
                        cfg: Config) -> tuple[Phase, int]:
    """(c): B's POSTs while C's many new agents hold every push ``cfg.hang_s`` (after (b): A's runs cancelled)."""
    await cancel_runs(conn, w.hanging.autopilot)
    for t in w.many:
        await insert_backlog(conn, t.autopilot, t.trigger, cfg.many_runs)
    # C takes what it may of every worker's slots; wait until its held pushes stop growing.
    deadline, held, last = time.monotonic() + min(30.0, cfg.hang_s), -1, 0.0
    while time.monotonic() < deadline:
        now = await stats.label("many", "inflight")
        if now != held:
            held, last = now, time.monotonic()
        elif now > 0 and time.monotonic() - last > 2.0:
            break
        await asyncio.sleep(0.1)

    async def many_on(sent: int, elapsed: float) -> bool:
        return elapsed < cfg.hang_measure_s

    loaded = Phase("B, during C's many new agents",
                   await post_steady(http, gateway, w.fast.token, cfg.b_rate, many_on, "bm"))
    await collect(stats, loaded, "fast", lambda t: int(t["inflight"].get("many", 0)), 30)
    return loaded, held


async def run(url: str, secret_key: str, cfg: Config, log_dir: Path) -> Report:
    """Start the agent, the gateway and the workers over migrated database ``url``; run (a), (b), then (c).

    Every process started here is killed before returning, whatever happens.
    """
    agent_port = free_port()
    agent_log = (log_dir / "agent.log").open("wb")
    agent = subprocess.Popen([sys.executable, str(ROOT / "bench" / "agent.py"), str(agent_port)], cwd=ROOT,
                             stdout=agent_log, stderr=subprocess.STDOUT)
    spawner = Spawner(env={"HOOKGATE_DATABASE_URL": url, "HOOKGATE_SECRET_KEY": secret_key,
                           "HOOKGATE_AGENT_ALLOW_CIDRS": AGENT_ALLOW, "HOOKGATE_LOG_LEVEL": "warning",
                           "HOOKGATE_IP_REQUEST_CAP": "100000000"}, log_dir=log_dir)
    conn = await database.connect(url)
    try:
        keyring = Keyring([base64.b64decode(secret_key)])
        w = await make_world(conn, keyring, f"http://127.0.0.1:{agent_port}", cfg)
        for _ in range(cfg.workers):
            spawner.start("worker")
        gateway = spawner.start("gateway", gateway=True)
        await asyncio.to_thread(gateway.wait_ready)
        await wait_listeners(conn, cfg.workers)
        async with aiohttp.ClientSession() as http:
            stats = AgentStats(http, f"http://127.0.0.1:{agent_port}")
            for _ in range(100):  # the agent is up when it answers
                try:
                    await stats.reset()
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
            quiet_base, quiet_flood, flood_s, flood_done = await flood_scenario(conn, http, stats, gateway.url, w, cfg)
            b_base, b_hang, held = await hang_scenario(conn, http, stats, gateway.url, w, cfg)
            b_many, many_held = (await many_scenario(conn, http, stats, gateway.url, w, cfg) if w.many
                                 else (None, 0))
        return Report(quiet_base, quiet_flood, b_base, b_hang, flood_s, flood_done, held, b_many, many_held)
    finally:
        await conn.close()
        spawner.kill_all()
        agent.kill()
        agent.wait(10)
        agent_log.close()


@dataclass(frozen=True)
class Target:
    """One pass/fail line."""

    name: str
    value: float
    limit: float

    @property
    def ok(self) -> bool:
        """Met when the value is at or under the limit."""
        return self.value <= self.limit

    def line(self) -> str:
        """``PASS|FAIL name: value <= limit``."""
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.value:.2f} ms (limit {self.limit:.2f} ms)"


def targets(report: Report, p99_limit_ms: float = 2000.0, p50_factor: float = 3.0) -> list[Target]:
    """The bench's targets: p99 under load ≤ 2 s, and p50 under load within 3× of the unloaded p50."""
    checks = [
        Target("(a) quiet p99 during the flood", report.quiet_flood.p99(), p99_limit_ms),
        Target("(a) quiet p50 during the flood vs 3x unloaded", report.quiet_flood.p50(),
               p50_factor * report.quiet_base.p50()),
        Target("(b) B p99 during A's hang", report.b_hang.p99(), p99_limit_ms),
        Target("(b) B p50 during A's hang vs 3x unloaded", report.b_hang.p50(), p50_factor * report.b_base.p50()),
    ]
    if report.b_many is not None:
        checks += [
            Target("(c) B p99 during C's many new agents", report.b_many.p99(), p99_limit_ms),
            Target("(c) B p50 during C's many new agents vs 3x unloaded", report.b_many.p50(),
                   p50_factor * report.b_base.p50()),
        ]
    return checks
