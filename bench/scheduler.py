"""Benchmark: N schedule triggers firing every minute against several ``hookgate scheduler`` processes.

Prints fire lag (run ``created_at`` − ``planned_at``, and the moment the run's NOTIFY reached a listener,
i.e. when it was committed and visible), duplicates, missed occurrences and the schedulers' CPU.

    /work/venv/bin/python bench/scheduler.py --server postgresql://postgres@127.0.0.1:5432/postgres

It creates (and drops) its own database on that server. Runtime: until the ``--minutes``-th minute
boundary after a warm-up of at least ``--warmup`` seconds (about 1.5 to 3 minutes with the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autopilot import agents, rules, workspaces  # noqa: E402
from hookgate import crypto, database, migrations, notify  # noqa: E402
from hookgate.context import with_database  # noqa: E402

SECRET = base64.b64encode(b"b" * 32).decode()
JOB = "autopilot_schedule_dispatch"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=os.environ.get("HOOKGATE_BENCH_SERVER_URL",
                                                           "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--triggers", type=int, default=10_000)
    parser.add_argument("--schedulers", type=int, default=2)
    parser.add_argument("--minutes", type=int, default=2, help="minute boundaries measured")
    parser.add_argument("--warmup", type=float, default=12.0, help="seconds between start and the first boundary")
    parser.add_argument("--concurrency", type=int, default=4, help="HOOKGATE_SCHEDULER_CONCURRENCY per process")
    parser.add_argument("--pool-min", type=int, default=8, help="HOOKGATE_POOL_MIN_SIZE: connections kept warm")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    return parser.parse_args()


async def create_world(dsn: str, triggers: int, first: datetime) -> None:
    """A workspace, an HTTP agent, one autopilot and ``triggers`` '* * * * *' triggers due at ``first``."""
    conn = await database.connect(dsn)
    try:
        await migrations.migrate(conn)
        boot = await workspaces.bootstrap(conn, "bench")
        keyring = crypto.Keyring([base64.b64decode(SECRET)])
        agent = await agents.create_http_agent(conn, keyring, workspace_id=boot.workspace_id,
                                               owner_id=boot.member_id, name="agent", url="http://127.0.0.1:9/")
        autopilot, _ = await rules.create_autopilot(
            conn, workspace_id=boot.workspace_id, creator_id=boot.member_id, title="bench",
            assignee_type="agent", assignee_id=agent.row["id"], execution_mode="run_only")
        # Bulk insert (the per-trigger rule versions are irrelevant to the scheduler's cost).
        await conn.execute(
            """INSERT INTO autopilot_trigger (workspace_id, autopilot_id, kind, cron, timezone, overlap_policy,
                                              next_fire_at, published_by_type, published_by_id)
               SELECT $1, $2, 'schedule', '* * * * *', 'UTC', 'allow', $3, 'member', $4
               FROM generate_series(1, $5)""",
            boot.workspace_id, autopilot["id"], first, boot.member_id, triggers)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def start_schedulers(dsn: str, args: argparse.Namespace, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "HOOKGATE_DATABASE_URL": dsn, "HOOKGATE_SECRET_KEY": SECRET,
           "HOOKGATE_LOG_LEVEL": "warning", "PYTHONPATH": str(ROOT),
           "HOOKGATE_SCHEDULER_CONCURRENCY": str(args.concurrency), "HOOKGATE_POOL_MIN_SIZE": str(args.pool_min)}
    procs = []
    for i in range(args.schedulers):
        with (log_dir / f"scheduler-{i}.log").open("wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "hookgate.cli", "scheduler"], cwd=ROOT, env=env,
                                          stdout=log, stderr=subprocess.STDOUT))
    return procs


def cpu_seconds(procs: list[psutil.Process]) -> list[float]:
    return [p.cpu_times().user + p.cpu_times().system for p in procs]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(dsn: str, args: argparse.Namespace, boundaries: list[datetime], log_dir: Path) -> dict[str, Any]:
    notified: dict[str, float] = {}
    listener = await asyncpg.connect(dsn)
    await listener.add_listener(notify.RUNS, lambda _c, _p, _ch, payload: notified.setdefault(payload, time.time()))
    procs = start_schedulers(dsn, args, log_dir)
    watched = [psutil.Process(p.pid) for p in procs]
    try:
        await asyncio.sleep(max(0.0, boundaries[0].timestamp() - time.time() - 2))
        cpu0, wall0 = cpu_seconds(watched), time.time()
        await asyncio.sleep(max(0.0, boundaries[-1].timestamp() - time.time() + 8))
        cpu1, wall1 = cpu_seconds(watched), time.time()
        for p in procs:
            assert p.poll() is None, (log_dir / "scheduler-0.log").read_text()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(20)
        await listener.close()
    return {"notified": notified, "cpu": [b - a for a, b in zip(cpu0, cpu1, strict=True)], "wall": wall1 - wall0}


async def report(dsn: str, args: argparse.Namespace, boundaries: list[datetime], seen: dict[str, Any]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        runs = await conn.fetch("SELECT id, trigger_id, planned_at, created_at FROM autopilot_run "
                                "WHERE planned_at = ANY($1::timestamptz[])", boundaries)
        executions = await conn.fetchval("SELECT count(*) FROM sys_cron_executions WHERE job_name = $1 "
                                         "AND plan_time = ANY($2::timestamptz[])", JOB, boundaries)
        runners = await conn.fetch("SELECT runner_id, count(*) FROM sys_cron_executions WHERE job_name = $1 "
                                   "GROUP BY runner_id ORDER BY runner_id", JOB)
    finally:
        await conn.close()
    expected = args.triggers * len(boundaries)
    distinct = {(r["trigger_id"], r["planned_at"]) for r in runs}
    lag = [(r["created_at"] - r["planned_at"]).total_seconds() for r in runs]
    visible = [seen["notified"][str(r["id"])] - r["planned_at"].timestamp() for r in runs
               if str(r["id"]) in seen["notified"]]
    print(f"triggers={args.triggers} schedulers={args.schedulers} concurrency={args.concurrency} "
          f"pool_min={args.pool_min} occurrences={len(boundaries)} "
          f"({', '.join(b.strftime('%H:%M') for b in boundaries)})")
    print(f"runs={len(runs)} expected={expected} executions={executions}")
    print(f"duplicates={len(runs) - len(distinct) + max(0, executions - len(distinct))} "
          f"missed={expected - len(distinct)}")
    print(f"fire lag created_at-planned_at (s): p50={pct(lag, .5):.3f} p99={pct(lag, .99):.3f} max={max(lag):.3f}")
    if visible:
        print(f"fire lag committed (NOTIFY seen) (s): p50={pct(visible, .5):.3f} p99={pct(visible, .99):.3f} "
              f"max={max(visible):.3f} (n={len(visible)})")
    cpu = seen["cpu"]
    print(f"scheduler CPU over {seen['wall']:.0f} s: " + ", ".join(f"{c:.2f} s" for c in cpu)
          + f" (total {sum(cpu):.2f} s, {100 * sum(cpu) / seen['wall']:.1f} % of one core; "
          f"{sum(cpu) / max(1, len(runs)) * 1e3:.3f} ms per run)")
    print("claims per runner: " + ", ".join(f"{r['runner_id']}={r['count']}" for r in runners))
    for boundary in boundaries:
        one = [(r["created_at"] - r["planned_at"]).total_seconds() for r in runs if r["planned_at"] == boundary]
        if one:
            print(f"  {boundary:%H:%M}: runs={len(one)} min={min(one):.3f} p50={pct(one, .5):.3f} "
                  f"p99={pct(one, .99):.3f} max={max(one):.3f} mean={statistics.fmean(one):.3f}")
    print(f"host: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


async def main() -> None:
    args = parse_args()
    name = f"hg_bench_{os.getpid()}"
    admin = await asyncpg.connect(args.server)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = with_database(args.server, name)
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / name
    log_dir.mkdir(exist_ok=True)
    try:
        now = datetime.now(UTC)
        first = (now + timedelta(seconds=args.warmup + 60)).replace(second=0, microsecond=0)
        boundaries = [first + timedelta(minutes=i) for i in range(args.minutes)]
        setup_started = time.monotonic()
        await create_world(dsn, args.triggers, first)
        print(f"setup {time.monotonic() - setup_started:.1f} s; first occurrence {first:%H:%M:%S} UTC")
        seen = await measure(dsn, args, boundaries, log_dir)
        await report(dsn, args, boundaries, seen)
    finally:
        if not args.keep:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
