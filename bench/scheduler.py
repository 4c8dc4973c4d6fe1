"""Benchmark: N schedule triggers firing every minute against several ``hookgate scheduler`` processes.

Prints fire lag (run ``created_at`` − ``planned_at``, and the moment the run's NOTIFY reached a listener,
i.e. when it was committed and visible), how many occurrences fired exactly once, duplicates, missed
occurrences, each scheduler's CPU and peak RSS, the CPU of the database backends, and the same-run
floor: the bare loop a team would write instead (as many processes and connections as the herd, each
claiming a batch of due triggers ``FOR UPDATE SKIP LOCKED`` and firing it in one statement), with the
herd's p99 lag ÷ the loop's; also that loop on plain tables, the herd's writes as set-based statements and
a raw INSERT rate.

    python bench/scheduler.py --server postgresql://postgres@127.0.0.1:5432/postgres
    python bench/scheduler.py --triggers 100000

It creates (and drops) its own database on that server, and a clone of it for the baselines (the clone
is dropped before the schedulers start). Runtime: until the ``--minutes``-th minute boundary after a
warm-up of at least ``--warmup`` seconds (about 1.5 to 3 minutes with the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
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

from figures import percentile, print_statements, top_statements  # noqa: E402  (bench/, this script's folder)

from autopilot import agents, rules, workspaces  # noqa: E402
from hookgate import crypto, database, migrations, notify  # noqa: E402
from hookgate.context import with_database  # noqa: E402
from hookgate.settings import Settings  # noqa: E402
from tests import databases  # noqa: E402
from tests.processes import stop_all  # noqa: E402

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
    parser.add_argument("--batch", type=int, default=None,
                        help="HOOKGATE_SCHEDULER_CLAIM_BATCH: occurrences fired per statement (default: the setting's)")
    parser.add_argument("--tail", type=float, default=None,
                        help="seconds measured after the last boundary (default: 8, or triggers / 5000 if more)")
    parser.add_argument("--statements", type=int, default=0,
                        help="print the N statements the database spent most time in over the measured window "
                             "(needs pg_stat_statements in shared_preload_libraries of --server)")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    args = parser.parse_args()
    if args.tail is None:
        args.tail = max(8.0, args.triggers / 5000)
    return args


async def baseline(server: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same-run floors, on a clone of the bench database (dropped before the schedulers start).

    ``loop``: the bare loop a team would write instead, run by as many processes as the herd has schedulers,
    each with as many connections as a scheduler has batches in flight: claim a batch of due triggers
    ``FOR UPDATE SKIP LOCKED`` and fire it in one statement (a run, a ``SUCCESS`` execution row and the
    trigger's next time, each row of the real tables), one commit per batch; its p99 lag is when 99 % of the
    occurrences were committed, from the moment the processes start. ``plain``: the same loop on two plain
    tables (no foreign key, one index each). ``set``: the herd's writes as set-based statements on one
    connection, rolled back; ``raw``: narrow rows into a temporary table (the machine's speed today).
    """
    clone = f"{name}_floor"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{clone}" TEMPLATE "{name}" STRATEGY FILE_COPY')
        dsn = with_database(server, clone)
        conn = await asyncpg.connect(dsn)
        try:
            found: dict[str, Any] = await _set_based(conn, args.triggers)
            await conn.execute(PLAIN_SETUP)
            await conn.execute("VACUUM ANALYZE")
        finally:
            await conn.close()
        found["plain"] = loop_floor(dsn, "plain", args)
        if args.statements:  # the loop's statements, to read beside the herd's (the same counters)
            await _statements_reset(dsn)
        found["loop"] = loop_floor(dsn, "loop", args)
        if args.statements:
            conn = await asyncpg.connect(dsn)
            try:
                found["statements"] = await top_statements(conn, args.statements)
            finally:
                await conn.close()
        return found
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{clone}" WITH (FORCE)')
        await admin.close()


async def _statements_reset(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_stat_statements_reset()")
    finally:
        await conn.close()


#: The plain tables of the ``plain`` floor: due rows and fired rows, nothing else.
PLAIN_SETUP = """
    CREATE TABLE floor_trigger (id uuid PRIMARY KEY, next_fire_at timestamptz NOT NULL);
    CREATE INDEX ON floor_trigger (next_fire_at);
    INSERT INTO floor_trigger SELECT id, next_fire_at FROM autopilot_trigger;
    CREATE TABLE floor_run (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), trigger_id uuid NOT NULL,
                            planned_at timestamptz NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
                            payload jsonb NOT NULL);
"""

#: One batch of a floor loop: $1 = the due instant (fired triggers are next due a minute after it), $2 = batch
#: size; its status says how many occurrences it fired.
FIRE = {
    "plain": """WITH due AS (SELECT id, next_fire_at FROM floor_trigger WHERE next_fire_at <= $1
                              ORDER BY next_fire_at LIMIT $2 FOR UPDATE SKIP LOCKED),
                     fired AS (INSERT INTO floor_run (trigger_id, planned_at, payload)
                               SELECT id, next_fire_at, jsonb_build_object('trigger_id', id) FROM due)
                UPDATE floor_trigger t SET next_fire_at = $1 + interval '1 minute'
                FROM due WHERE t.id = due.id""",
    "loop": """WITH due AS (SELECT t.id, t.workspace_id, t.autopilot_id, t.next_fire_at, t.published_by_id
                             FROM autopilot_trigger t
                             WHERE t.kind = 'schedule' AND t.enabled AND t.deleted_at IS NULL AND t.next_fire_at <= $1
                             ORDER BY t.next_fire_at LIMIT $2 FOR UPDATE SKIP LOCKED),
                    runs AS (INSERT INTO autopilot_run (workspace_id, autopilot_id, trigger_id, source, status,
                                                        rule_version_id, planned_at, payload, accountable_id)
                             SELECT due.workspace_id, due.autopilot_id, due.id, 'schedule', 'pending', v.id,
                                    due.next_fire_at,
                                    jsonb_build_object('event', 'schedule.fired',
                                                       'payload', jsonb_build_object('trigger_id', due.id)),
                                    due.published_by_id
                             FROM due JOIN autopilot_rule_version v ON v.autopilot_id = due.autopilot_id),
                    executions AS (INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time,
                                       status, attempt, max_attempts, runner_id, lease_token, heartbeat_at,
                                       stale_after, started_at, single_flight, runner_lock, finished_at,
                                       duration_ms, result)
                                   SELECT 'autopilot_schedule_dispatch', 'trigger', due.id::text, due.next_fire_at,
                                          'SUCCESS', 1, 3, 'floor', gen_random_uuid(), now(), now(), now(), true, 1,
                                          now(), 0, jsonb_build_object('run_id', due.id)
                                   FROM due ON CONFLICT DO NOTHING)
               UPDATE autopilot_trigger t SET last_fired_at = due.next_fire_at,
                                              next_fire_at = $1 + interval '1 minute'
               FROM due WHERE t.id = due.id""",
}


def loop_floor(dsn: str, variant: str, args: argparse.Namespace) -> tuple[float, float]:
    """The bare loop ``variant`` run by ``--schedulers`` processes started together, as the herd's.

    Returns its p99 lag (s) and the CPU seconds of its database backends (same host only).
    """
    start = time.time() + 3  # every process started, connected and waiting (checked)
    batch = args.batch or Settings.model_fields["scheduler_claim_batch"].default
    procs = [subprocess.Popen([sys.executable, __file__, "--floor-worker", dsn, variant, str(batch),
                               str(args.concurrency), repr(start)], stdout=subprocess.PIPE)
             for _ in range(args.schedulers)]
    lags: list[float] = []
    pg_cpu = 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"floor worker exited {proc.returncode}"
        found = json.loads(out)
        pg_cpu += found["pg_cpu"]
        for lag, count in found["done"]:
            lags += [lag] * count
    assert len(lags) == args.triggers, f"the {variant} floor fired {len(lags)} of {args.triggers}"
    return percentile(lags, .99), pg_cpu


async def floor_worker(dsn: str, variant: str, batch: int, concurrency: int, start: float) -> None:
    """One process of a floor loop: ``concurrency`` connections firing due batches from ``start`` on."""
    conns = [await asyncpg.connect(dsn) for _ in range(concurrency)]
    statement = FIRE[variant]
    due = datetime.fromtimestamp(start, UTC)
    done: list[tuple[float, int]] = []

    async def fire(conn: asyncpg.Connection) -> None:
        while True:
            async with conn.transaction():
                status = await conn.execute(statement, due, batch)
            fired = int(status.split()[-1])
            if not fired:
                return
            done.append((time.time() - start, fired))

    if time.time() > start:  # its lag would count its own start-up: not a floor
        sys.exit("floor worker: connected after the start instant")
    await asyncio.sleep(start - time.time())
    await asyncio.gather(*(fire(c) for c in conns))
    backends = [psutil.Process(await c.fetchval("SELECT pg_backend_pid()")).cpu_times() for c in conns]
    for conn in conns:
        await conn.close()
    print(json.dumps({"done": done, "pg_cpu": sum(t.user + t.system for t in backends)}))


async def _set_based(conn: asyncpg.Connection, triggers: int) -> dict[str, float]:
    """The herd's writes as set-based statements on one connection, each rolled back (seconds)."""
    statements = {
        "raw": ("CREATE TEMPORARY TABLE floor_raw (a uuid, b timestamptz, c text)",
                "INSERT INTO floor_raw SELECT gen_random_uuid(), now(), 'x' FROM generate_series(1, $1::int)",
                (triggers,)),
        "runs": (None, """INSERT INTO autopilot_run (workspace_id, autopilot_id, trigger_id, source, status,
                                                    rule_version_id, planned_at, payload, accountable_id)
                          SELECT t.workspace_id, t.autopilot_id, t.id, 'schedule', 'pending', v.id, t.next_fire_at,
                                 jsonb_build_object('event', 'schedule.fired',
                                                    'payload', jsonb_build_object('trigger_id', t.id)),
                                 t.published_by_id
                          FROM autopilot_trigger t JOIN autopilot_rule_version v ON v.autopilot_id = t.autopilot_id
                          ORDER BY t.id""", ()),
        "executions": (None, """INSERT INTO sys_cron_executions (job_name, scope_kind, scope_id, plan_time, status,
                                    attempt, max_attempts, runner_id, lease_token, heartbeat_at, stale_after,
                                    started_at, single_flight, runner_lock, finished_at, duration_ms, result)
                                SELECT $1, 'trigger', t.id::text, t.next_fire_at, 'SUCCESS', 1, 3, 'floor',
                                       gen_random_uuid(), now(), now(), now(), true, 1, now(), 0,
                                       jsonb_build_object('run_id', t.id)
                                FROM autopilot_trigger t ORDER BY t.id
                                ON CONFLICT DO NOTHING""", (JOB,)),
        "triggers": (None, """UPDATE autopilot_trigger SET last_fired_at = next_fire_at,
                                     next_fire_at = next_fire_at + interval '1 minute'""", ()),
    }
    seconds = {}
    for label, (before, statement, args) in statements.items():
        transaction = conn.transaction()
        await transaction.start()
        try:
            if before:
                await conn.execute(before)
            started = time.perf_counter()
            await conn.execute(statement, *args)
            seconds[label] = time.perf_counter() - started
        finally:
            await transaction.rollback()
    return seconds


async def create_world(dsn: str, triggers: int, first: datetime) -> None:
    """A workspace, an HTTP agent, one autopilot and ``triggers`` '* * * * *' triggers due at ``first``."""
    conn = await database.connect(dsn)
    try:
        await migrations.migrate(conn)
        with contextlib.suppress(asyncpg.PostgresError):  # only where the server preloads it (--statements)
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
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


async def set_first(dsn: str, first: datetime) -> None:
    """Make every trigger due at ``first`` (after the baseline, so that the clone's work does not eat the warm-up)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("UPDATE autopilot_trigger SET next_fire_at = $1 WHERE kind = 'schedule'", first)
        await conn.execute("VACUUM ANALYZE autopilot_trigger")
    finally:
        await conn.close()


def start_schedulers(dsn: str, args: argparse.Namespace, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "HOOKGATE_DATABASE_URL": dsn, "HOOKGATE_SECRET_KEY": SECRET,
           "HOOKGATE_LOG_LEVEL": "warning", "PYTHONPATH": str(ROOT),
           "HOOKGATE_SCHEDULER_CONCURRENCY": str(args.concurrency), "HOOKGATE_POOL_MIN_SIZE": str(args.pool_min)}
    if args.batch is not None:
        env["HOOKGATE_SCHEDULER_CLAIM_BATCH"] = str(args.batch)
    procs = []
    for i in range(args.schedulers):
        with (log_dir / f"scheduler-{i}.log").open("wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "hookgate.cli", "scheduler"], cwd=ROOT, env=env,
                                          stdout=log, stderr=subprocess.STDOUT))
    return procs


def cpu_seconds(procs: list[psutil.Process]) -> list[float]:
    return [p.cpu_times().user + p.cpu_times().system for p in procs]


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (``VmHWM``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def backend_cpu(conn: asyncpg.Connection) -> dict[int, float]:
    """CPU seconds (user + system) of every backend connected to this database, by pid (same host only)."""
    pids = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    found = {}
    for row in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(row["pid"]).cpu_times()
            found[row["pid"]] = times.user + times.system
    return found


async def measure(dsn: str, args: argparse.Namespace, boundaries: list[datetime], log_dir: Path) -> dict[str, Any]:
    notified: dict[str, float] = {}
    listener = await asyncpg.connect(dsn)
    await listener.add_listener(notify.RUNS, lambda _c, _p, _ch, payload: notified.setdefault(payload, time.time()))
    procs = start_schedulers(dsn, args, log_dir)
    watched = [psutil.Process(p.pid) for p in procs]
    try:
        await asyncio.sleep(max(0.0, boundaries[0].timestamp() - time.time() - 2))
        if args.statements:
            await listener.execute("SELECT pg_stat_statements_reset()")
        cpu0, wall0, pg0 = cpu_seconds(watched), time.time(), await backend_cpu(listener)
        load0 = os.getloadavg()
        await asyncio.sleep(max(0.0, boundaries[-1].timestamp() - time.time() + args.tail))
        cpu1, wall1, pg1 = cpu_seconds(watched), time.time(), await backend_cpu(listener)
        load1 = os.getloadavg()
        rss = [peak_rss_mb(p.pid) for p in procs]
        statements = await top_statements(listener, args.statements) if args.statements else []
        for p in procs:
            assert p.poll() is None, (log_dir / "scheduler-0.log").read_text()
    finally:
        stop_all(procs, 20)
        await listener.close()
    return {"notified": notified, "cpu": [b - a for a, b in zip(cpu0, cpu1, strict=True)], "wall": wall1 - wall0,
            "pg_cpu": sum(t - pg0.get(pid, 0.0) for pid, t in pg1.items()), "rss": rss, "load": (load0, load1),
            "statements": statements}


async def report(dsn: str, args: argparse.Namespace, boundaries: list[datetime], seen: dict[str, Any]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        runs = await conn.fetch("SELECT id, trigger_id, planned_at, created_at FROM autopilot_run "
                                "WHERE planned_at = ANY($1::timestamptz[])", boundaries)
        executions = await conn.fetchval("SELECT count(*) FROM sys_cron_executions WHERE job_name = $1 "
                                         "AND plan_time = ANY($2::timestamptz[])", JOB, boundaries)
        # An occurrence fired exactly once: one run, and one execution row, SUCCESS at its first attempt.
        once = await conn.fetchval(
            """SELECT count(*) FROM (
                   SELECT r.trigger_id, r.planned_at FROM autopilot_run r
                   WHERE r.planned_at = ANY($2::timestamptz[])
                   GROUP BY r.trigger_id, r.planned_at HAVING count(*) = 1) one
               WHERE (SELECT count(*) FROM sys_cron_executions e
                      WHERE e.job_name = $1 AND e.scope_kind = 'trigger' AND e.scope_id = one.trigger_id::text
                        AND e.plan_time = one.planned_at AND e.status = 'SUCCESS' AND e.attempt = 1) = 1""",
            JOB, boundaries)
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
          f"pool_min={args.pool_min} batch={args.batch or 'default'} occurrences={len(boundaries)} "
          f"({', '.join(b.strftime('%H:%M') for b in boundaries)})")
    print(f"runs={len(runs)} expected={expected} executions={executions} "
          f"fired exactly once={once} ({100 * once / max(1, expected):.2f} %)")
    print(f"duplicates={len(runs) - len(distinct) + max(0, executions - len(distinct))} "
          f"missed={expected - len(distinct)}")
    print(f"fire lag created_at-planned_at (s): p50={percentile(lag, .5):.3f} p99={percentile(lag, .99):.3f} "
          f"max={max(lag):.3f}")
    if visible:
        print(f"fire lag committed (NOTIFY seen) (s): p50={percentile(visible, .5):.3f} "
              f"p99={percentile(visible, .99):.3f} max={max(visible):.3f} (n={len(visible)})")
    cpu = seen["cpu"]
    print(f"scheduler CPU over {seen['wall']:.0f} s: " + ", ".join(f"{c:.2f} s" for c in cpu)
          + f" (total {sum(cpu):.2f} s, {100 * sum(cpu) / seen['wall']:.1f} % of one core; "
          f"{sum(cpu) / max(1, len(runs)) * 1e3:.3f} ms per run)")
    wall = seen["wall"]
    print(f"PostgreSQL backends of the bench database: {seen['pg_cpu']:.2f} s CPU over {wall:.0f} s "
          f"({seen['pg_cpu'] / max(1, len(runs)) * 1e3:.3f} ms per run)")
    print("scheduler peak RSS (VmHWM): " + ", ".join(f"{mb:.1f} MB" for mb in seen["rss"]))
    floor = seen["floor"]
    herd = floor["runs"] + floor["executions"] + floor["triggers"]
    print(f"baselines (same run, on a clone, before the schedulers start): raw INSERT of {args.triggers} narrow rows "
          f"{floor['raw']:.3f} s ({args.triggers / floor['raw']:,.0f} rows/s); the herd's writes as 3 set-based "
          f"statements on one connection {herd:.3f} s (runs {floor['runs']:.3f} + executions {floor['executions']:.3f} "
          f"+ trigger updates {floor['triggers']:.3f})")
    (loop99, loop_cpu), (plain99, plain_cpu) = floor["loop"], floor["plain"]
    print(f"floor: bare SKIP LOCKED loop, {args.schedulers} processes x {args.concurrency} connections, one statement "
          f"per batch of {args.batch or 'default'}: p99 lag {loop99:.3f} s writing the herd's rows (run, SUCCESS "
          f"execution, trigger; backends {loop_cpu / args.triggers * 1e3:.3f} ms CPU per occurrence), "
          f"{plain99:.3f} s on two plain tables ({plain_cpu / args.triggers * 1e3:.3f} ms)")
    lag99 = percentile(visible or lag, .99)
    print(f"summary  p99 lag ÷ floor {lag99 / loop99:.2f} (p99 {'committed ' if visible else ''}lag "
          f"{lag99:.3f} s against the bare loop's {loop99:.3f} s, same run; ÷ the plain-table loop "
          f"{lag99 / plain99:.2f}; ÷ the set-based writes {lag99 / herd:.2f})")
    print("BENCH " + json.dumps({"subject": f"cron herd, {args.triggers:,} triggers", "value": once,
                                 "unit": f"of {expected} once", "p50_ms": round(percentile(visible or lag, .5) * 1e3),
                                 "p99_ms": round(lag99 * 1e3),
                                 "baseline": f"bare SKIP LOCKED loop p99 {loop99:.3f} s",
                                 "ratio": round(lag99 / loop99, 2)}))
    if seen["statements"]:
        print("statements by execution time over the window (pg_stat_statements; nested ones are also inside "
              "their caller's time):")
        print_statements(seen["statements"])
        print("the floor's (bare loop) statements, same counters:")
        print_statements(floor.get("statements", []))
    print("claims per runner: " + ", ".join(f"{r['runner_id']}={r['count']}" for r in runners))
    for boundary in boundaries:
        mine = [r for r in runs if r["planned_at"] == boundary]
        one = [(r["created_at"] - r["planned_at"]).total_seconds() for r in mine]
        seen_one = [seen["notified"][str(r["id"])] - boundary.timestamp() for r in mine
                    if str(r["id"]) in seen["notified"]]
        if one:
            print(f"  {boundary:%H:%M}: runs={len(one)} min={min(one):.3f} p50={percentile(one, .5):.3f} "
                  f"p99={percentile(one, .99):.3f} max={max(one):.3f} mean={statistics.fmean(one):.3f}"
                  + (f"; committed p99={percentile(seen_one, .99):.3f}" if seen_one else "")
                  + f"; not fired by the end: {args.triggers - len(one)}")
    (l0, l1) = seen["load"]
    print(f"host: {os.cpu_count()} CPUs, load average (1/5/15 min) at the first boundary "
          f"{' '.join(f'{x:.2f}' for x in l0)}, at the end {' '.join(f'{x:.2f}' for x in l1)}")


async def main() -> None:
    args = parse_args()
    name = f"hg_bench_{os.getpid()}"
    dsn = await databases.create(args.server, name)
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / name
    log_dir.mkdir(exist_ok=True)
    try:
        setup_started = time.monotonic()
        await create_world(dsn, args.triggers, datetime(2000, 1, 1, tzinfo=UTC))
        floor = await baseline(args.server, name, args)
        now = datetime.now(UTC)
        first = (now + timedelta(seconds=args.warmup + 60)).replace(second=0, microsecond=0)
        boundaries = [first + timedelta(minutes=i) for i in range(args.minutes)]
        await set_first(dsn, first)
        print(f"setup {time.monotonic() - setup_started:.1f} s; first occurrence {first:%H:%M:%S} UTC")
        seen = await measure(dsn, args, boundaries, log_dir) | {"floor": floor}
        await report(dsn, args, boundaries, seen)
    finally:
        if not args.keep:
            await databases.drop(args.server, name)
            shutil.rmtree(log_dir, ignore_errors=True)  # the schedulers' logs (--keep keeps them with the database)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--floor-worker"]:
        dsn_, variant_, batch_, concurrency_, start_ = sys.argv[2:]
        asyncio.run(floor_worker(dsn_, variant_, int(batch_), int(concurrency_), float(start_)))
    else:
        asyncio.run(main())
