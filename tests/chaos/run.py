"""The chaos run: real role processes over one PostgreSQL, webhook load, misbehaving agents, injected faults.

``run_chaos(Config(...))`` builds the cluster, runs load and faults together (and, during the load, an
outage of the HTTP agent: ``tests/chaos/outage.py``), stops the faults, waits for quiescence, checks every
invariant (``tests/chaos/checks.py``) and returns a ``Report``. Used by
``bench/chaos.py`` (the documented command) and ``tests/chaos/test_chaos.py`` (the CI-sized run).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from tests.chaos import checks, world
from tests.chaos.agents import HttpAgent, PullRuntimes
from tests.chaos.cluster import Cluster
from tests.chaos.faults import Faults
from tests.chaos.load import Load
from tests.chaos.outage import AgentOutage


@dataclass(frozen=True)
class Config:
    """Size of a run. Defaults: the CI-sized run (about a minute and a half)."""

    events: int = 2000
    rate: float = 40.0
    gateways: int = 2
    workers: int = 3
    schedulers: int = 2
    schedules: int = 3
    fault_interval: tuple[float, float] = (2.0, 6.0)
    restart_postgres: bool = True
    quiescence_timeout_s: float = 120.0
    agent_outage_s: float = 18.0  # the HTTP agent is down this long during the load (0: never)
    agent_outage_at: float = 0.6  # ... from this share of the load's planned duration
    server_url: str | None = None
    seed: int | None = None
    pooler: bool = False  # the roles' pools through a real PgBouncer in transaction mode (tests/pooler.py)


@dataclass
class Report:
    """What happened and what was violated (empty ``violations`` = the run passed)."""

    config: Config
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    recoveries: list[tuple[str, int, float | None]] = field(default_factory=list)
    outage: AgentOutage | None = None

    @property
    def ok(self) -> bool:
        """True when every invariant held."""
        return not self.violations

    def table(self) -> str:
        """The summary table printed at the end of a run."""
        width = max(len(k) for k in self.figures) + 2
        lines = [f"{k:<{width}}{v}" for k, v in self.figures.items()]
        for role, held, seconds in self.recoveries:
            shown = "not recovered" if seconds is None else f"{seconds:.1f} s"
            lines.append(f"{'recovery ' + role:<{width}}{shown} (held {held} leases)")
        lines += [f"VIOLATION {v}" for v in self.violations[:50]]
        lines.append(f"{'result':<{width}}{'PASS' if self.ok else 'FAIL'} in {self.seconds:.0f} s")
        return "\n".join(lines)


def run_chaos(config: Config) -> Report:
    """Run one chaos experiment end to end (blocking)."""
    cluster = Cluster.create(config.server_url, pooler=config.pooler)
    report = None
    try:
        cluster.start(config.gateways, config.workers, config.schedulers)
        report = asyncio.run(_experiment(cluster, config))
        return report
    finally:
        cluster.stop()
        if report is not None and report.ok:
            cluster.remove()  # a failed run keeps its database and logs for inspection


async def _experiment(cluster: Cluster, config: Config) -> Report:
    rng = random.Random(config.seed)
    started = time.monotonic()
    agent = HttpAgent(rng=random.Random(rng.random()))
    agent_url = await agent.start()
    boot = cluster.bootstrap()
    made = await asyncio.to_thread(world.build, cluster.gateway_urls(), boot["api_key"], agent_url, config.schedules)
    agent.secret = made.push_secret
    runtimes = PullRuntimes(cluster.gateway_urls(), made.runtime_token, rng=random.Random(rng.random()))
    load = Load(made.hook_urls, config.events, config.rate, rng=random.Random(rng.random()))
    restart_at = config.events / config.rate * 0.4 if config.restart_postgres and cluster.db.restartable else None
    faults = Faults(cluster, config.fault_interval, restart_at, rng=random.Random(rng.random()))
    outage = None
    if config.agent_outage_s > 0:
        at_s = config.events / config.rate * config.agent_outage_at
        outage = AgentOutage(agent, made.http_agent_id, cluster.dsn, at_s, config.agent_outage_s,
                             drain_timeout_s=config.quiescence_timeout_s)
    background = [asyncio.create_task(c) for c in (runtimes.run(), faults.run(), faults.watch_recovery(cluster.dsn))]
    watching = [asyncio.create_task(c) for c in (outage.run(), outage.watch())] if outage is not None else []
    # As in a deployment, the pull runtime is up before the webhooks come: a standard run admitted before its
    # first heartbeat is skipped runtime_offline, rightly, and a loaded machine let 13 in before it.
    await asyncio.wait_for(runtimes.online.wait(), 60)
    await load.run()
    faults.stopping = True
    await background[1]
    crashed = [r for r in await asyncio.gather(*watching, return_exceptions=True) if isinstance(r, BaseException)]
    await load.settle()
    report = await _settle_and_check(cluster, config, agent, runtimes, load, faults, outage, made.http_agent_id)
    report.violations += [f"the agent outage's driver or watcher crashed: {e!r}" for e in crashed]
    report.violations += checks.secrets_not_logged(cluster.work.glob("proc-*.log"), made.secrets)
    report.violations += checks.no_prepared_statement_errors(cluster.work.glob("proc-*.log"))
    runtimes.stopping = True
    background[2].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*background)
    await agent.stop()
    report.seconds = time.monotonic() - started
    return report


async def _settle_and_check(cluster: Cluster, config: Config, agent: HttpAgent, runtimes: PullRuntimes,
                            load: Load, faults: Faults, outage: AgentOutage | None, agent_id: str) -> Report:
    report = Report(config)
    conn = await asyncpg.connect(cluster.dsn)
    try:
        waited = await checks.wait_quiescent(conn, config.quiescence_timeout_s, 0.5)
        dead = [k.pid for k in faults.kills]
        for found in (await checks.every_2xx_stored(conn, load), await checks.one_run_per_delivery(conn),
                      await checks.runs_terminal(conn), await checks.runs_not_failed(conn),
                      await checks.occurrences_once(conn), await checks.tasks_once(conn, agent, runtimes),
                      await checks.pushes_acknowledged(conn, agent, agent_id),
                      await checks.no_dead_leases(conn, dead)):
            report.violations += found
        outage_figures: dict[str, Any] = {}
        if outage is not None:
            found, outage_figures = await outage.check(conn)
            report.violations += found
            report.outage = outage
        if load.unanswered:
            report.violations.append(f"{load.unanswered} events never got a final answer")
        report.figures = _figures(load, agent, runtimes, faults, await checks.figures(conn), waited, report)
        report.figures |= outage_figures
    finally:
        await conn.close()
    report.recoveries = [(k.role, k.held, k.recovered_s) for k in faults.kills]
    return report


def _figures(load: Load, agent: HttpAgent, runtimes: PullRuntimes, faults: Faults, db: dict[str, Any],
             waited: float, report: Report) -> dict[str, Any]:
    statuses = load.statuses
    ok = sum(n for s, n in statuses.items() if isinstance(s, int) and 200 <= s < 300)
    lost = sum("lost" in v or "runs still" in v or "has 0 runs" in v for v in report.violations)
    doubled = sum("doubled" in v or "completed" in v or "fired" in v or "executed" in v for v in report.violations)
    return {
        "events (new)": len(load._events), "requests sent": load.sent, "2xx": ok,
        "503": statuses.get(503, 0), "401 (forged)": statuses.get(401, 0),
        "connection errors": sum(n for s, n in statuses.items() if isinstance(s, str)),
        "duplicates caught": load.outcomes.get("duplicate", 0), **db,
        "http pushes": agent.pushes, "distinct webhook-ids answered 2xx": len(agent.acked),
        "same webhook-id answered 2xx again": sum(n - 1 for n in agent.acked.values()),
        "pull claims": runtimes.claims, "runtimes vanished": runtimes.vanished,
        "kills (worker/scheduler)": f"{sum(k.role == 'worker' for k in faults.kills)}/"
                                    f"{sum(k.role == 'scheduler' for k in faults.kills)}",
        "connection cuts": faults.cuts,
        "postgres restarts": f"{faults.postgres_restarts} ({faults.postgres_down_s:.1f} s down)",
        "quiescence after load": f"{waited:.1f} s", "lost": lost, "doubled": doubled,
    }
