"""Prometheus metrics: one registry, every ``hookgate_…`` metric, and the scrape-time queue collector.

Counters and histograms are updated in place by the code that does the work (one line per place).
Queue depth and age are not counted in process: they are read from the database at scrape time by
:class:`QueueStats`, with a short statement timeout and a small cache, so a scrape storm costs at most
one cheap query set per cache period and a saturated database makes scrapes stale, never slow.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from hookgate import database
from sql import Q

log = logging.getLogger("hookgate.metrics")

#: Every process-local metric lives here (not in prometheus_client's global default registry).
REGISTRY = CollectorRegistry(auto_describe=True)

# Latency buckets for a request that does one short transaction: 1 ms to 10 s.
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Fire lag: the target is under a second; anything past a minute is an incident.
_LAG = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 15.0, 60.0, 300.0)

INGRESS_REQUESTS = Counter(
    "hookgate_ingress_requests", "Webhook requests answered, by outcome and provider preset",
    ["outcome", "preset"], registry=REGISTRY,
)
INGRESS_LATENCY = Histogram(
    "hookgate_ingress_latency_seconds", "Time from request start to response for POST /hooks/…",
    ["outcome"], buckets=_LATENCY, registry=REGISTRY,
)
INGRESS_BODY_MISMATCH = Counter(
    "hookgate_ingress_body_mismatch", "Correctly signed duplicates whose raw body differs from the stored "
    "delivery's (still answered 200 duplicate), by provider preset", ["preset"], registry=REGISTRY,
)
INGRESS_LOOKUPS = Counter(
    "hookgate_ingress_token_lookups", "Token lookups the ingress sent to the database (cache misses; concurrent "
    "misses of one token share one lookup)", registry=REGISTRY,
)
INGEST_BATCH = Histogram(
    "hookgate_ingress_batch_size", "Deliveries written per ingress statement (group commit of concurrent requests)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=REGISTRY,
)
RATE_REJECTIONS = Counter(
    "hookgate_rate_gate_rejections", "Requests refused with 429, by gate (ip_cap, bad_credentials, trigger)",
    ["gate"], registry=REGISTRY,
)
CONNECTIONS_CLOSED = Counter(
    "hookgate_http_connections_closed", "HTTP connections closed to hold the connection limits, by reason "
    "(idle: closed to make room for a new one; refused_ip, refused_cap: a new one refused, nothing idle to close)",
    ["reason"], registry=REGISTRY,
)
CLAIMS = Counter(
    "hookgate_claims", "Work items claimed with a lease, by queue (deliveries, runs, tasks)",
    ["queue"], registry=REGISTRY,
)
COMPLETIONS = Counter(
    "hookgate_completions", "Work items finished by their holder, by queue and outcome",
    ["queue", "outcome"], registry=REGISTRY,
)
RETRIES = Counter(
    "hookgate_retries", "Work items released for a later attempt (backoff), by queue",
    ["queue"], registry=REGISTRY,
)
LEASE_EXPIRIES = Counter(
    "hookgate_lease_expiries", "Leases found expired and put back in the queue (EXPIRE), by queue",
    ["queue"], registry=REGISTRY,
)
PUSH_OUTCOMES = Counter(
    "hookgate_push_outcomes", "Pushes to HTTP agents, by agent id and outcome (ok, accepted, retry, failed)",
    ["agent", "outcome"], registry=REGISTRY,
)
SCHEDULER_PLANS = Counter(
    "hookgate_scheduler_plans", "Scheduler plans by job and outcome (claimed, late_skipped, failed, succeeded)",
    ["job", "outcome"], registry=REGISTRY,
)
FIRE_LAG = Histogram(
    "hookgate_scheduler_fire_lag_seconds", "Delay between a plan's time and the moment its handler started",
    ["job"], buckets=_LAG, registry=REGISTRY,
)
QUEUE_SCRAPE_ERRORS = Counter(
    "hookgate_queue_stats_errors", "Queue statistics queries that failed or timed out at scrape time",
    registry=REGISTRY,
)


def count_outcomes(queue: str, outcomes: Iterable[str]) -> None:
    """Count finished work by outcome; ``retry`` counts as a retry, not a completion (one call per batch)."""
    for outcome in outcomes:
        if outcome == "retry":
            RETRIES.labels(queue).inc()
        else:
            COMPLETIONS.labels(queue, outcome).inc()


def scheduler_started(job: str, plans: Iterable[tuple[datetime, datetime]]) -> None:
    """Count claimed plans ``(plan_time, claimed_at)`` of a job; observe each one's fire lag (negative: 0)."""
    lags = [max(0.0, (claimed_at - plan_time).total_seconds()) for plan_time, claimed_at in plans]
    if not lags:
        return
    SCHEDULER_PLANS.labels(job, "claimed").inc(len(lags))
    histogram = FIRE_LAG.labels(job)  # one label lookup per batch, not per plan (a herd is 10,000 plans)
    for lag in lags:
        histogram.observe(lag)


@dataclass(frozen=True)
class QueueRow:
    """Depth and oldest age of one queue (``agent`` is set for per-agent task queues)."""

    queue: str
    agent: str
    depth: int
    oldest_age_s: float


@dataclass
class QueueStats:
    """Queue depth per queue, read from the database at most once per ``ttl`` seconds.

    ``timeout`` bounds both the wait for a pooled connection and each statement, so a scrape of a
    saturated database returns the previous values (and ``hookgate_queue_stats_up 0``) quickly.
    """

    pool: asyncpg.Pool
    ttl: float = 5.0
    timeout: float = 1.0
    rows: list[QueueRow] = field(default_factory=list)
    fetched_at: float = float("-inf")
    up: bool = False
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def refresh(self) -> None:
        """Re-read the queues if the cache is older than ``ttl``; concurrent scrapes share one read."""
        async with self._lock:
            if time.monotonic() - self.fetched_at < self.ttl:
                return
            try:
                self.rows = await asyncio.wait_for(self._read(), self.timeout)
                self.up = True
            except database.DATABASE_ERRORS as exc:
                QUEUE_SCRAPE_ERRORS.inc()
                log.warning("queue statistics unavailable", extra={"error": exc.__class__.__name__})
                self.up = False
            self.fetched_at = time.monotonic()

    async def _read(self) -> list[QueueRow]:
        async with self.pool.acquire() as conn, conn.transaction(readonly=True):
            await conn.execute(Q.metrics_statement_timeout, f"{int(self.timeout * 1000)}ms")
            found = [QueueRow("deliveries", "", r["depth"], r["oldest_age_s"])
                     for r in await conn.fetch(Q.metrics_delivery_queue)]
            found += [QueueRow("runs_pending", "", r["depth"], r["oldest_age_s"])
                      for r in await conn.fetch(Q.metrics_run_queue)]
            found += [QueueRow("tasks", str(r["agent_id"]), r["depth"], r["oldest_age_s"])
                      for r in await conn.fetch(Q.metrics_task_queue)]
            return found

    def families(self) -> Iterator[Metric]:
        """The cached values as gauge families."""
        depth = GaugeMetricFamily("hookgate_queue_depth", "Items waiting in a queue (tasks: per agent)",
                                  labels=["queue", "agent"])
        age = GaugeMetricFamily("hookgate_queue_oldest_age_seconds", "Age of the oldest waiting item",
                                labels=["queue", "agent"])
        for row in self.rows:
            depth.add_metric([row.queue, row.agent], row.depth)
            age.add_metric([row.queue, row.agent], row.oldest_age_s)
        up = GaugeMetricFamily("hookgate_queue_stats_up", "1 if the last queue statistics read succeeded")
        up.add_metric([], 1.0 if self.up else 0.0)
        yield from (depth, age, up)


def pool_families(pool: asyncpg.Pool) -> Iterator[Metric]:
    """The connection pool of this process: configured maximum, open connections, idle and in use."""
    family = GaugeMetricFamily("hookgate_db_pool_connections", "Database pool connections by state",
                               labels=["state"])
    size, idle = pool.get_size(), pool.get_idle_size()
    for state, value in (("max", pool.get_max_size()), ("size", size), ("free", idle), ("in_use", size - idle)):
        family.add_metric([state], value)
    yield family


class _Snapshot(Collector):
    """Process counters plus already-fetched families, as one collector for the text exposition."""

    def __init__(self, extra: Iterable[Metric]) -> None:
        self.extra = list(extra)

    def collect(self) -> Iterable[Metric]:
        yield from REGISTRY.collect()
        yield from self.extra


async def render(pool: asyncpg.Pool, stats: QueueStats | None) -> bytes:
    """The Prometheus text exposition of this process: counters, pool usage and (if given) queues."""
    extra = list(pool_families(pool))
    if stats is not None:
        await stats.refresh()
        extra += list(stats.families())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(extra))
    return generate_latest(registry)
