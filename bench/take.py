"""Benchmark: what one take by name of one announced delivery costs the server, next to a bare claim of one job.

At a steady rate every webhook is taken alone, by name (the worker's hot path at low load), and that take is the
largest single part of what a webhook costs PostgreSQL on its way to its agent. This measures it without the noise
of the other processes: one connection makes ``--takes`` takes, each of one freshly admitted delivery (what
ingress stores) whose HTTP agent has a free slot, so each is claimed and born running; another connection makes
the deliveries and frees the slot between takes. The taking connection's server process does nothing else, so its
CPU (``/proc``, user + system, the commit's flush included) over the loop is the takes' own.

Beside it, in the same run and the same way: a bare claim of one named job from a one-table queue that writes
one task row, one statement and its commit per call (the floor any PostgreSQL queue pays for a hand-over).

    HOOKGATE_BENCH_SERVER_URL=postgresql://postgres@127.0.0.1:5432/postgres python bench/take.py [--takes 1000]
    python bench/take.py --history-days 30      # as a deployment that kept 30 more days of deliveries

It creates (and drops) its own database on that server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

from pydantic import SecretStr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dispatch import KEY, world  # noqa: E402  (bench/, this script's folder)
from figures import cpu_seconds, percentile  # noqa: E402

from hookgate import database  # noqa: E402
from hookgate.context import open_context  # noqa: E402
from hookgate.settings import Settings  # noqa: E402
from tests import databases  # noqa: E402
from tests.fairness.scenarios import insert_backlog  # noqa: E402
from worker import take  # noqa: E402
from worker.deliveries import options_for  # noqa: E402
from worker.push import Pusher  # noqa: E402

DB = f"hookgate_bench_take_{os.getpid()}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--takes", type=int, default=1000,
                        help="takes measured, after 100 unmeasured (CPU is counted in 10 ms ticks: under 1,000 the "
                             "floor's figure is coarse)")
    parser.add_argument("--history-days", type=int, default=0, help="make this many more days of partitions first")
    return parser.parse_args()


def summary(walls_us: list[float], cpu_s: float) -> dict[str, float]:
    """Wall time per call (p50, p99, mean) and the server process's CPU per call, in microseconds."""
    return {"p50_us": percentile(walls_us, 0.5), "p99_us": percentile(walls_us, 0.99),
            "mean_us": statistics.fmean(walls_us), "cpu_us": cpu_s * 1e6 / len(walls_us)}


async def takes(url: str, count: int, warmup: int = 100) -> dict[str, float]:
    """``count`` named takes of one delivery each: wall time per take (p50, p99) and the backend's CPU per take."""
    setup, taker = await database.connect(url), await database.connect(url)
    try:
        ap, trigger, _ = await world(setup, "http://127.0.0.1:9/agent")  # no push is made
        s = Settings(database_url=SecretStr(url), secret_key=SecretStr(KEY))
        async with open_context(s, migrate=False) as ctx:  # the worker's own options, which claim at once
            options = options_for(ctx, "bench-take", Pusher(ctx, holder="bench-take"))
        pid = await taker.fetchval("SELECT pg_backend_pid()")
        walls: list[float] = []
        for i in range(warmup + count):
            if i == warmup:
                cpu0 = cpu_seconds([pid])
            await setup.execute("UPDATE agent_slot SET lease_token = NULL WHERE lease_token IS NOT NULL")
            await insert_backlog(setup, ap, trigger, 1)
            named = await setup.fetchval("SELECT id FROM webhook_delivery WHERE status = 'queued'")
            start = time.perf_counter()
            taken = await take.take_batch(taker, limit=s.delivery_batch, lease_s=s.delivery_lease_s, cursor=None,
                                          fanout=16, options=options, capacity=64, ids=[named])
            walls.append((time.perf_counter() - start) * 1e6)
            if len(taken.claimed) != 1:
                raise RuntimeError(f"take {i}: {taken.dispatched} dispatched, {len(taken.claimed)} claimed, not 1")
        return summary(walls[warmup:], cpu_seconds([pid]) - cpu0)
    finally:
        await setup.close()
        await taker.close()


async def floor(url: str, count: int, warmup: int = 100) -> dict[str, float]:
    """A bare claim of one named job that writes one task row: the same figures, per call."""
    setup, claimer = await database.connect(url), await database.connect(url)
    try:
        await setup.execute("CREATE TABLE bench_job (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',"
                            " payload jsonb)")
        await setup.execute("CREATE TABLE bench_task (id bigserial PRIMARY KEY, job_id bigint NOT NULL, "
                            "lease uuid NOT NULL, payload jsonb)")
        pid = await claimer.fetchval("SELECT pg_backend_pid()")
        claim = await claimer.prepare(
            "WITH c AS (SELECT id, payload FROM bench_job WHERE id = $1 AND status = 'queued' FOR UPDATE SKIP LOCKED),"
            " d AS (UPDATE bench_job j SET status = 'dispatched' FROM c WHERE j.id = c.id) "
            "INSERT INTO bench_task (job_id, lease, payload) SELECT id, gen_random_uuid(), payload FROM c RETURNING id")
        walls: list[float] = []
        for i in range(warmup + count):
            if i == warmup:
                cpu0 = cpu_seconds([pid])
            job = await setup.fetchval("INSERT INTO bench_job (payload) VALUES ('{\"n\": 1}') RETURNING id")
            start = time.perf_counter()
            claimed = await claim.fetchval(job)
            walls.append((time.perf_counter() - start) * 1e6)
            if claimed is None:
                raise RuntimeError(f"floor {i}: job {job} not claimed")
        return summary(walls[warmup:], cpu_seconds([pid]) - cpu0)
    finally:
        await setup.close()
        await claimer.close()


async def main(args: argparse.Namespace) -> None:
    server = os.environ.get("HOOKGATE_BENCH_SERVER_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    url = await databases.create(server, DB, migrated=True)
    try:
        conn = await database.connect(url)
        if args.history_days:
            await conn.fetch("SELECT hookgate_partitions_ensure(now() + make_interval(days => $1))", args.history_days)
        partitions = await conn.fetchval(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'webhook_delivery'::regclass")
        version = await conn.fetchval("SELECT current_setting('server_version')")
        fsync = await conn.fetchval("SELECT current_setting('fsync')")
        await conn.close()
        bare = await floor(url, args.takes)
        named = await takes(url, args.takes)
    finally:
        await databases.drop(server, DB)
    report = {"server_version": version, "fsync": fsync, "delivery_partitions": partitions, "takes": args.takes,
              **{f"take_{k}": round(v) for k, v in named.items()}, **{f"floor_{k}": round(v) for k, v in bare.items()},
              "take_over_floor_cpu": round(named["cpu_us"] / bare["cpu_us"], 2),
              "take_over_floor_p50": round(named["p50_us"] / bare["p50_us"], 2)}
    print(json.dumps(report, indent=2))
    print("BENCH " + json.dumps({"subject": "named take of one delivery", "value": round(named["cpu_us"]),
                                 "unit": "us backend CPU", "p50_ms": round(named["p50_us"] / 1000, 3),
                                 "p99_ms": round(named["p99_us"] / 1000, 3),
                                 "baseline": f"bare claim of one job {round(bare['cpu_us'])} us",
                                 "ratio": report["take_over_floor_cpu"]}))


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
