"""Dispatch benchmark: deliveries -> runs -> tasks pushed to a local HTTP agent, next to a raw queue baseline.

One command (PostgreSQL server URL in ``HOOKGATE_BENCH_SERVER_URL``, default the local trust-auth server)::

    python bench/dispatch.py [--runs 20000] [--workers 2] [--rate 200] [--seconds 10] [--pooler] [--drain-only]
    python bench/dispatch.py --runs 2000 --statements 15   # also where PostgreSQL spent phase 4, per webhook
    python bench/dispatch.py --runs 2000 --history-days 365 # as a deployment that kept a year of deliveries

1. **baseline**: a bare ``FOR UPDATE SKIP LOCKED`` claim + complete loop over a one-table queue (jobs/s).
2. **drain**: ``--runs`` queued deliveries with admitted runs (what ingress stores) are drained by
   ``--workers`` real ``hookgate worker`` processes: run, task, claim, signed push, completion, audit (runs/s).
3. **latency**: one delivery + run committed with NOTIFY every ``1/--rate`` s (the writes of ingress steps
   7-12), measured from just before that transaction to the agent's receipt of the push (p50/p99).
4. **end to end**: ``POST /hooks/{token}`` to a real ``hookgate gateway`` process every ``1/--rate`` s,
   measured from just before the POST to the agent's receipt of the signed push (p50/p99), and the CPU per
   webhook of the gateway, the workers and their PostgreSQL server processes over this phase; also where the
   time goes, read back from the rows (``e2e_stages_p50_ms``, each from the POST: the ingest's transaction
   started, the take's transaction started, the push started, the push's answer came back).
5. **bare chain**: the same POSTs at the same rate to ``bench/bare_chain.py`` (Starlette ``INSERT`` + ``NOTIFY``,
   a ``LISTEN``ing asyncpg loop, one HTTP POST to the same agent): the floor of phase 4, and its ratios.
``--loop`` picks the event loop of every server process (``HOOKGATE_EVENT_LOOP``; default uvloop, as they run).
The agent is a separate minimal HTTP server process (``bench/agent.py``). With ``--pooler`` the workers' and the
gateway's pools go through a real PgBouncer in transaction mode (``tests/pooler.py``; their LISTEN straight to
the server), so the figures show what the pooler and what it disables cost. ``--statements N`` prints the N
statements phase 4 spent most execution time in, with calls and microseconds per webhook (it needs
``pg_stat_statements`` in the server's ``shared_preload_libraries``; the counters are reset for that phase).
``--history-days N`` first makes N more day partitions of deliveries (made ahead, empty), as many as a deployment
that kept N days of deliveries has: what a cached plan over the partitioned table pays for is their count.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import cpu_seconds, percentile, print_statements, top_statements  # noqa: E402  (bench/, this script's folder)

from autopilot import agents, workspaces  # noqa: E402
from hookgate import database  # noqa: E402
from hookgate.crypto import Keyring  # noqa: E402
from tests import databases  # noqa: E402
from tests.fairness.scenarios import insert_backlog, post_steady, tenant  # noqa: E402
from tests.pooler import PgBouncer  # noqa: E402
from tests.processes import free_port, stop_all, wait_listeners  # noqa: E402

KEY = base64.b64encode(b"b" * 32).decode()
#: The bench agent is a local process: loopback is allowed explicitly, as an operator would.
AGENT_ALLOW = {"HOOKGATE_AGENT_ALLOW_CIDRS": "127.0.0.0/8,::1/128"}
DB = f"hookgate_bench_dispatch_{os.getpid()}"  # its own scratch database: two benches can run side by side


async def world(conn: Any, agent_url: str) -> tuple[Any, Any, str]:
    boot = await workspaces.bootstrap(conn, "bench")
    keyring = Keyring([base64.b64decode(KEY)])
    agent = await agents.create_http_agent(conn, keyring, workspace_id=boot.workspace_id, owner_id=boot.member_id,
                                           name="bench", url=agent_url, max_concurrency=256)
    bench = await tenant(conn, keyring, boot, agent.row["id"], "bench", "bench")
    return bench.autopilot, bench.trigger, bench.token


async def baseline(url: str, jobs: int, workers: int = 8, batch: int = 16) -> float:
    """A bare SKIP LOCKED queue: claim a batch, mark it done; jobs per second."""
    conn = await asyncpg.connect(url)
    await conn.execute("CREATE TABLE bench_job (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',"
                       " lease uuid, payload jsonb)")
    await conn.execute("CREATE INDEX ON bench_job (id) WHERE status = 'queued'")
    await conn.execute("INSERT INTO bench_job (payload) SELECT jsonb_build_object('n', g) "
                       "FROM generate_series(1, $1) g", jobs)
    await conn.close()
    pool = await asyncpg.create_pool(url, min_size=workers, max_size=workers)

    async def worker() -> None:
        while True:
            async with pool.acquire() as c:
                ids = await c.fetch("UPDATE bench_job SET lease = gen_random_uuid() WHERE id IN (SELECT id FROM "
                                    "bench_job WHERE status = 'queued' AND lease IS NULL LIMIT $1 "
                                    "FOR UPDATE SKIP LOCKED) RETURNING id", batch)
                if not ids:
                    return
                for row in ids:
                    await c.execute("UPDATE bench_job SET status = 'done' WHERE id = $1", row["id"])

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    elapsed = time.perf_counter() - start
    await pool.close()
    return jobs / elapsed


#: Whether anything is left to dispatch: a queued delivery, or a task queued or running (each a probe of a partial
#: index; a take turns its deliveries into tasks in one transaction, so no run is in neither set in between).
PENDING_WORK = """
    SELECT EXISTS (SELECT 1 FROM webhook_delivery WHERE status = 'queued')
        OR EXISTS (SELECT 1 FROM agent_task WHERE status = 'queued')
        OR EXISTS (SELECT 1 FROM agent_task WHERE status = 'running')"""


async def wait_done(conn: Any, total: int, timeout: float = 600) -> float:
    """When ``total`` tasks have succeeded.

    Polled with :data:`PENDING_WORK` every 10 ms, and counted (a scan of every task) only once that finds nothing
    left: counting every 50 ms took 1.6 s of PostgreSQL's time over a 20,000-run drain, on the cores the drain
    runs on, which the baseline loop beside it does not pay.
    """
    deadline = time.perf_counter() + timeout
    while True:
        idle = not await conn.fetchval(PENDING_WORK)
        late = time.perf_counter() > deadline
        if idle or late:
            done = await conn.fetchval("SELECT count(*) FROM agent_task WHERE status = 'succeeded'")
            if done >= total:
                return time.perf_counter()
            if late:
                raise TimeoutError(f"only {done}/{total} tasks succeeded")
        await asyncio.sleep(0.01)


def start_gateway(url: str, port: int, direct: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HOOKGATE_DATABASE_URL": url, "HOOKGATE_DIRECT_DATABASE_URL": direct,
           "HOOKGATE_SECRET_KEY": KEY, "HOOKGATE_LOG_LEVEL": "warning",
           "HOOKGATE_IP_REQUEST_CAP": "1000000", "PYTHONPATH": str(ROOT), **AGENT_ALLOW}
    return subprocess.Popen([sys.executable, "-m", "hookgate.cli", "gateway", "--port", str(port)], cwd=ROOT, env=env)


async def end_to_end(conn: Any, port: int, token: str, rate: float, seconds: float, total_before: int) -> None:
    """POST webhooks at a steady rate through the real gateway; the agent measures POST -> push receipt."""
    count = int(rate * seconds)

    async def more(sent: int, _elapsed: float) -> bool:
        return sent < count

    async with aiohttp.ClientSession() as http:
        for _ in range(100):  # the gateway is up when it answers
            try:
                async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        await post_steady(http, f"http://127.0.0.1:{port}", token, rate, more, "e2e")
    await wait_done(conn, total_before + count)


#: Phase 4's webhooks, each as milliseconds from its POST (the body's ``t0``, this host's clock as the database's):
#: when the ingest's transaction started (its run's ``created_at``), when the take's did (its task's), when the
#: worker began the push and when the push's answer came (its attempt's ``started_at`` and ``finished_at``).
STAGES = """
    WITH s AS (
        SELECT (convert_from(d.body, 'UTF8')::jsonb ->> 't0')::float8 AS t0, r.created_at AS ingest_txn,
               t.created_at AS take_txn, a.started_at AS push_start, a.finished_at AS push_answered
        FROM webhook_delivery d JOIN autopilot_run r ON r.id = d.run_id JOIN agent_task t ON t.run_id = r.id
        JOIN task_attempt a ON a.task_id = t.id
        WHERE d.dedupe_key LIKE '%e2e-%')
    SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ingest_txn) - t0) * 1000 AS ingest_txn,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM take_txn) - t0) * 1000 AS take_txn,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM push_start) - t0) * 1000 AS push_start,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM push_answered) - t0) * 1000 AS push_answered
    FROM s"""


async def bare_chain(http: httpx.AsyncClient, url: str, agent: int, rate: float, seconds: float,
                     loop: str) -> list[float]:
    """Phase 5: the same steady POSTs through the bare chain; the agent's latencies of its pushes."""
    port, count = free_port(), int(rate * seconds)
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bare_chain.py"), url, str(port),
                             f"http://127.0.0.1:{agent}/agent", loop])
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                try:
                    async with session.post(f"http://127.0.0.1:{port}/hooks/warm", data=b'{"warm": 1}') as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            await http.delete(f"http://127.0.0.1:{agent}/stats")

            async def more(sent: int, _elapsed: float) -> bool:
                return sent < count

            await post_steady(session, f"http://127.0.0.1:{port}", "bare", rate, more, "bare")
        for _ in range(200):
            stats = (await http.get(f"http://127.0.0.1:{agent}/stats")).json()
            if len(stats["latencies_ms"]) >= count:
                break
            await asyncio.sleep(0.05)
        return list(stats["latencies_ms"])
    finally:
        stop_all([proc], 10)


def start_workers(url: str, count: int, direct: str) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "HOOKGATE_DATABASE_URL": url, "HOOKGATE_DIRECT_DATABASE_URL": direct,
           "HOOKGATE_SECRET_KEY": KEY, "HOOKGATE_LOG_LEVEL": "warning",
           "HOOKGATE_DELIVERY_CONCURRENCY": "8", "HOOKGATE_DELIVERY_BATCH": "32", "PYTHONPATH": str(ROOT),
           **AGENT_ALLOW}
    return [subprocess.Popen([sys.executable, "-m", "hookgate.cli", "worker"], cwd=ROOT, env=env)
            for _ in range(count)]


async def latency(conn: Any, ap: Any, trigger: Any, rate: float, seconds: float, total_before: int) -> list[float]:
    count = int(rate * seconds)
    start = time.perf_counter()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await insert_backlog(conn, ap, trigger, 1, time.time())
    await wait_done(conn, total_before + count)
    return []


async def backends(conn: Any) -> list[int]:
    """The server processes of the other sessions on the bench database (the workers' and gateway's)."""
    rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid()")
    return [r["pid"] for r in rows]


async def main(args: argparse.Namespace) -> None:
    server = os.environ.get("HOOKGATE_BENCH_SERVER_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    url = await databases.create(server, DB, migrated=True)
    port = free_port()
    agent_proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "agent.py"), str(port)])
    workers: list[subprocess.Popen[bytes]] = []
    bouncer = PgBouncer.start(server, pool_size=20) if args.pooler else None
    pooled = bouncer.url(url) if bouncer is not None else url
    try:
        base_rate = await baseline(url, args.runs)
        conn = await database.connect(url)
        ap, trigger, token = await world(conn, f"http://127.0.0.1:{port}/agent")
        if args.statements:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        if args.history_days:
            await conn.fetch("SELECT hookgate_partitions_ensure(now() + make_interval(days => $1))", args.history_days)
        partitions = await conn.fetchval(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'webhook_delivery'::regclass")
        # Autovacuum decides when plans change under a drain, JIT whether a plan costed high compiles: a figure
        # is read with the server's settings beside it.
        server_settings = {name: await conn.fetchval("SELECT current_setting($1)", name)
                           for name in ("autovacuum", "jit")}
        workers = start_workers(pooled, args.workers, url)
        gateway_port = free_port()
        workers.append(start_gateway(pooled, gateway_port, url))
        await wait_listeners(conn, args.workers)
        drainers = [w.pid for w in workers[:args.workers]]
        await insert_backlog(conn, ap, trigger, args.runs)
        bouncer_pids = [bouncer.proc.pid] if bouncer is not None and bouncer.proc is not None else []
        start, cpu0, bouncer0 = time.perf_counter(), cpu_seconds(drainers), cpu_seconds(bouncer_pids)
        db0 = {pid: cpu_seconds([pid]) for pid in await backends(conn)}
        end = await wait_done(conn, args.runs)
        drain, drain_cpu = args.runs / (end - start), cpu_seconds(drainers) - cpu0
        bouncer_cpu = cpu_seconds(bouncer_pids) - bouncer0
        # Sessions opened during the drain started from zero.
        db_cpu = sum(cpu_seconds([pid]) - db0.get(pid, 0.0) for pid in await backends(conn))
        drained = {
            "pooler": "pgbouncer transaction mode" if bouncer is not None else "none",
            "delivery_partitions": partitions,
            "server_autovacuum": server_settings["autovacuum"], "server_jit": server_settings["jit"],
            "baseline_skip_locked_jobs_per_s": round(base_rate),
            "drain_runs_per_s": round(drain), "drain_runs": args.runs, "workers": args.workers,
            "drain_over_baseline": round(drain / base_rate, 3),
            "drain_worker_cpu_ms_per_run": round(drain_cpu * 1000 / args.runs, 3),
            "drain_postgres_cpu_ms_per_run": round(db_cpu * 1000 / args.runs, 3),
            "drain_pgbouncer_cpu_ms_per_run": round(bouncer_cpu * 1000 / args.runs, 3),
        }
        if args.drain_only:
            await conn.close()
            print(json.dumps(drained, indent=2))
            return
        async with httpx.AsyncClient() as http:
            await http.delete(f"http://127.0.0.1:{port}/stats")
            await latency(conn, ap, trigger, args.rate, args.seconds, args.runs)
            stats = (await http.get(f"http://127.0.0.1:{port}/stats")).json()
            await http.delete(f"http://127.0.0.1:{port}/stats")
            done_before = args.runs + int(args.rate * args.seconds)
            # CPU per webhook of each part of the chain at this rate (at a steady 200/s nothing is batched, so
            # it is what one webhook costs alone; the drain's figures above are per run under a backlog).
            gateway_pids = [w.pid for w in workers[args.workers:]]
            e2e_db0 = {pid: cpu_seconds([pid]) for pid in await backends(conn)}
            if args.statements:
                await conn.execute("SELECT pg_stat_statements_reset()")
            e2e_cpu0 = (cpu_seconds(drainers), cpu_seconds(gateway_pids))
            await end_to_end(conn, gateway_port, token, args.rate, args.seconds, done_before)
            e2e_count = int(args.rate * args.seconds)
            statements = await top_statements(conn, args.statements) if args.statements else []
            stages = dict((await conn.fetch(STAGES))[0])
            e2e_cpu = {"worker": cpu_seconds(drainers) - e2e_cpu0[0],
                       "gateway": cpu_seconds(gateway_pids) - e2e_cpu0[1],
                       "postgres": sum(cpu_seconds([pid]) - e2e_db0.get(pid, 0.0) for pid in await backends(conn))}
            e2e = (await http.get(f"http://127.0.0.1:{port}/stats")).json()["latencies_ms"]
            bare = await bare_chain(http, url, port, args.rate, args.seconds, args.loop)
        lat = stats["latencies_ms"]
        await conn.close()
        print(json.dumps({
            **drained,
            "latency_rate_per_s": args.rate, "latency_samples": len(lat),
            "latency_p50_ms": round(statistics.median(lat), 2), "latency_p99_ms": round(percentile(lat, 0.99), 2),
            "latency_max_ms": round(max(lat), 2),
            "e2e_post_to_agent_samples": len(e2e), "e2e_p50_ms": round(statistics.median(e2e), 2),
            "e2e_p99_ms": round(percentile(e2e, 0.99), 2), "e2e_max_ms": round(max(e2e), 2),
            "e2e_stages_p50_ms": {stage: round(ms, 2) for stage, ms in stages.items()},
            **{f"e2e_{part}_cpu_us_per_webhook": round(seconds * 1e6 / e2e_count) for part, seconds in e2e_cpu.items()},
            "bare_chain_samples": len(bare), "bare_chain_p50_ms": round(statistics.median(bare), 2),
            "bare_chain_p99_ms": round(percentile(bare, 0.99), 2),
            "e2e_over_bare_p50": round(statistics.median(e2e) / statistics.median(bare), 2),
            "e2e_over_bare_p99": round(percentile(e2e, 0.99) / percentile(bare, 0.99), 2),
            "event_loop": args.loop,
        }, indent=2))
        if statements:
            print(f"phase 4's statements by execution time ({e2e_count} webhooks; pg_stat_statements, "
                  "nested ones are also inside their callers' time):")
            print_statements(statements, per=e2e_count)
        # bench/run_all's table: each figure beside the same-run baseline it is read against.
        print("BENCH " + json.dumps({"subject": "drain, default settings", "value": round(drain),
                                     "unit": "runs/s", "baseline": f"{base_rate:.0f} jobs/s (bare SKIP LOCKED loop)",
                                     "ratio": round(drain / base_rate, 2)}))
        p50, p99 = statistics.median(e2e), percentile(e2e, 0.99)
        bare50, bare99 = statistics.median(bare), percentile(bare, 0.99)
        print("BENCH " + json.dumps({"subject": f"POST -> agent at {args.rate:.0f}/s", "value": round(p50, 2),
                                     "unit": "ms p50", "p50_ms": round(p50, 2), "p99_ms": round(p99, 2),
                                     "baseline": f"bare chain p50 {bare50:.2f} / p99 {bare99:.2f} ms",
                                     "ratio": f"{p50 / bare50:.2f} / {p99 / bare99:.2f}"}))
    finally:
        try:
            stop_all([*workers, agent_proc], 30)
        finally:
            if bouncer is not None:
                bouncer.stop()
            await databases.drop(server, DB)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20000, help="backlog size for the drain phase")
    parser.add_argument("--workers", type=int, default=2, help="hookgate worker processes")
    parser.add_argument("--rate", type=float, default=200.0, help="steady arrivals per second (latency phase)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency phase")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop",
                        help="event loop of the gateway, the workers and the bare chain")
    parser.add_argument("--drain-only", action="store_true",
                        help="phases 1 and 2 only: the bare loop and the drain beside it")
    parser.add_argument("--statements", type=int, default=0,
                        help="print the N statements phase 4 spent most time in, per webhook "
                             "(needs pg_stat_statements in shared_preload_libraries of the server)")
    parser.add_argument("--history-days", type=int, default=0,
                        help="first make this many more day partitions of deliveries, as a deployment that kept "
                             "as many days has (default 0: the 7 days made ahead)")
    parser.add_argument("--pooler", action="store_true",
                        help="the workers' and the gateway's pools through a real PgBouncer in transaction mode")
    parsed = parser.parse_args()
    os.environ["HOOKGATE_EVENT_LOOP"] = parsed.loop  # every server process this bench starts
    asyncio.run(main(parsed))
