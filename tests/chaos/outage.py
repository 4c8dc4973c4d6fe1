"""An outage of the HTTP agent during the load: down longer than its retry schedule would survive, then back.

``AgentOutage.run`` waits ``at_s`` seconds into the load, makes the agent refuse connections for the first
half of ``length_s`` and answer every push 503 for the second half, brings it back on the same URL, and
times how long the backlog (the agent's runs made before it came back) takes to drain. ``watch`` records
every change of the agent's health (``agent_health``: state and since, database time) meanwhile.

Without the circuit breaker a task pushed when the outage starts would spend its attempts (the chaos
schedule spans about 13 s) and fail; with it the agent turns unhealthy after ``HOOKGATE_AGENT_TRIP_AFTER``
failed pushes, its tasks wait without spending attempts, one probe goes out per probe interval, and the
first probe after the return makes it healthy and lets the backlog flow. ``check`` (after quiescence)
proves the breaker's part: unhealthy during the outage, healthy after the return, the outage's attempts on
record; the checks in ``checks.py`` prove that no run failed and each run's push was answered 2xx.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from tests.chaos.agents import HttpAgent

#: Runs of the agent made before ``$2`` that are not terminal yet: the backlog of the outage.
BACKLOG = """
SELECT count(*) FROM autopilot_run r JOIN autopilot a ON a.id = r.autopilot_id
WHERE a.assignee_type = 'agent' AND a.assignee_id = $1 AND r.created_at < $2
  AND r.status NOT IN ('completed', 'failed', 'cancelled', 'skipped')
"""

#: Attempts of the agent started during the outage, by outcome and by whether the circuit was open.
ATTEMPTS = """
SELECT outcome, started_at >= $4 AS probe, count(*) AS n FROM task_attempt
WHERE agent_id = $1 AND started_at >= $2 AND started_at < $3
GROUP BY 1, 2 ORDER BY 1, 2
"""


@dataclass(frozen=True)
class Transition:
    """The agent's health changed to ``state`` at ``since`` (database time)."""

    state: str
    since: datetime


@dataclass
class AgentOutage:
    """Takes the HTTP agent down once during the load and records what its circuit breaker did."""

    agent: HttpAgent
    agent_id: str
    dsn: str
    at_s: float
    length_s: float
    drain_timeout_s: float = 120.0
    down_at: datetime | None = None
    back_at: datetime | None = None
    drained_s: float | None = None
    transitions: list[Transition] = field(default_factory=list)
    attempts: dict[tuple[str, bool], int] = field(default_factory=dict)  # (outcome, probe) -> count, by check
    done: bool = False

    async def run(self) -> None:
        """Wait, go down (refused, then 503), come back, wait for the backlog to drain."""
        try:
            await asyncio.sleep(self.at_s)
            self.down_at = datetime.now(UTC)
            await self.agent.outage("refused")
            await asyncio.sleep(self.length_s / 2)
            await self.agent.outage("503")
            await asyncio.sleep(self.length_s / 2)
            await self.agent.recover()
            self.back_at, back = datetime.now(UTC), time.monotonic()
            while time.monotonic() - back < self.drain_timeout_s:
                if await self._backlog() == 0:
                    self.drained_s = time.monotonic() - back
                    break
                await asyncio.sleep(0.25)
        finally:
            await self.agent.recover()
            self.done = True

    async def _backlog(self) -> int | None:
        """Runs of the agent made before its return and still open (None: the database did not answer)."""
        conn: asyncpg.Connection | None = None
        try:
            conn = await asyncpg.connect(self.dsn, timeout=5)
            return int(await conn.fetchval(BACKLOG, self.agent_id, self.back_at, timeout=5))
        except Exception:  # any failure of one look is a look that did not answer
            return None
        finally:
            if conn is not None:
                conn.terminate()

    async def watch(self) -> None:
        """Record each change of the agent's health (polls five times a second) until the outage is over."""
        conn: asyncpg.Connection | None = None
        try:
            while not self.done:
                conn = await self._look(conn)
                await asyncio.sleep(0.2)
            await self._look(conn)
        finally:
            if conn is not None:
                conn.terminate()

    async def _look(self, conn: asyncpg.Connection | None) -> asyncpg.Connection | None:
        try:
            conn = conn if conn is not None and not conn.is_closed() else await asyncpg.connect(self.dsn, timeout=5)
            row = await conn.fetchrow("SELECT state, since FROM agent_health WHERE agent_id = $1", self.agent_id,
                                      timeout=5)
        except Exception:  # the database is restarting, or the connection broke with it
            # (asyncpg can leave a connection cut mid-query in a state only a new connection gets out of).
            if conn is not None:
                conn.terminate()
            return None
        seen = None if row is None else Transition(row["state"], row["since"])
        # The row appears healthy with the agent's first failed push: the first change recorded is a trip.
        if seen is not None and (self.transitions[-1] != seen if self.transitions else seen.state == "unhealthy"):
            self.transitions.append(seen)
        return conn

    @property
    def probes(self) -> int:
        """Pushes that went out while the circuit was open (after :meth:`check`)."""
        return sum(n for (_, probe), n in self.attempts.items() if probe)

    def tripped(self) -> Transition | None:
        """The first turn to unhealthy inside the outage."""
        assert self.down_at is not None and self.back_at is not None
        return next((t for t in self.transitions
                     if t.state == "unhealthy" and self.down_at <= t.since <= self.back_at), None)

    def recovered(self) -> Transition | None:
        """The first turn to healthy after the return."""
        assert self.back_at is not None
        return next((t for t in self.transitions if t.state == "healthy" and t.since >= self.back_at), None)

    async def check(self, conn: asyncpg.Connection) -> tuple[list[str], dict[str, Any]]:
        """Violations of the breaker's part, and the outage's figures."""
        if self.down_at is None or self.back_at is None:
            return ["the agent outage never happened (the load was too short?)"], {}
        found, tripped, recovered = [], self.tripped(), self.recovered()
        if tripped is None:
            found.append("the agent never turned unhealthy during its outage")
        if recovered is None:
            found.append("the agent never turned healthy after its outage")
        state = await conn.fetchval("SELECT state FROM agent_health WHERE agent_id = $1", self.agent_id)
        if state not in (None, "healthy"):
            found.append(f"the agent is {state} at the end of the run")
        if self.drained_s is None:
            found.append(f"the agent's backlog did not drain within {self.drain_timeout_s:.0f} s of its return")
        trip_at = tripped.since if tripped is not None else self.back_at
        rows = await conn.fetch(ATTEMPTS, self.agent_id, self.down_at, self.back_at, trip_at)
        self.attempts = {(r["outcome"], r["probe"]): r["n"] for r in rows}
        outcomes = {r["outcome"] for r in rows}
        found += [f"no {o} attempt recorded during the agent's outage" for o in ("unreachable", "failed")
                  if o not in outcomes]
        return found, self._figures(tripped, recovered, rows)

    def _figures(self, tripped: Transition | None, recovered: Transition | None,
                 rows: list[Any]) -> dict[str, Any]:
        assert self.down_at is not None and self.back_at is not None
        before = sum(r["n"] for r in rows if not r["probe"])
        probes = sum(r["n"] for r in rows if r["probe"])
        by_outcome = ", ".join(f"{r['n']} {r['outcome']}{' (probe)' if r['probe'] else ''}" for r in rows)
        changes = ", ".join(f"{t.state} at {(t.since - self.down_at).total_seconds():+.1f} s" for t in self.transitions)
        return {
            "agent outage": f"{(self.back_at - self.down_at).total_seconds():.1f} s "
                            f"(refused, then 503 from +{self.length_s / 2:.1f} s)",
            "agent health changes (from outage start)": changes or "none",
            "unhealthy after": "never" if tripped is None
                               else f"{(tripped.since - self.down_at).total_seconds():.1f} s",
            "healthy again after return": "never" if recovered is None
                                          else f"{(recovered.since - self.back_at).total_seconds():.1f} s",
            "backlog drained after return": "not" if self.drained_s is None else f"{self.drained_s:.1f} s",
            "outage attempts before trip / probes": f"{before} / {probes}",
            "outage attempts by outcome": by_outcome or "none",
            "probes": probes,
            "pushes answered 503 (agent side)": self.agent.answered_503,
        }
