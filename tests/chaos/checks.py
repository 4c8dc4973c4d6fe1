"""The invariants a chaos run must keep, checked from the database and from what the agents recorded.

Each check returns a list of violations (empty = kept). ``quiescent`` says when no work is left in flight.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import asyncpg

from tests.chaos.agents import HttpAgent, PullRuntimes
from tests.chaos.load import Load

TERMINAL = ("completed", "failed", "cancelled", "skipped")

IN_FLIGHT = """
SELECT (SELECT count(*) FROM webhook_delivery WHERE status = 'queued')
     + (SELECT count(*) FROM autopilot_run WHERE status NOT IN ('completed', 'failed', 'cancelled', 'skipped'))
     + (SELECT count(*) FROM agent_task WHERE status IN ('queued', 'running'))
"""


async def quiescent(conn: asyncpg.Connection) -> bool:
    """True when no delivery is queued, every run is terminal and no task is queued or running."""
    return int(await conn.fetchval(IN_FLIGHT)) == 0


async def wait_quiescent(conn: asyncpg.Connection, timeout: float, poll: float) -> float:
    """Seconds until nothing is in flight (or the timeout), checked every ``poll`` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < timeout and not await quiescent(conn):
        await asyncio.sleep(poll)
    return time.monotonic() - start


async def every_2xx_stored(conn: asyncpg.Connection, load: Load) -> list[str]:
    """Every 2xx named a delivery that exists, and all 2xx answers for one event named the same delivery."""
    found = []
    named = {d for ids in load.delivered.values() for d in ids}
    rows = await conn.fetch("SELECT id::text FROM webhook_delivery WHERE id::text = ANY($1)", list(named))
    missing = named - {r["id"] for r in rows}
    found += [f"2xx for delivery {d} but no such row (lost)" for d in sorted(missing)]
    found += [f"event {key} answered with {len(ids)} deliveries (doubled)"
              for key, ids in load.delivered.items() if len(ids) > 1]
    if load.forged_2xx:
        found.append(f"{load.forged_2xx} forged requests answered 2xx")
    return found


async def one_run_per_delivery(conn: asyncpg.Connection) -> list[str]:
    """Every accepted delivery is dispatched with exactly one run, linked both ways."""
    rows = await conn.fetch("""
        SELECT d.id, d.status, d.run_id, count(r.id) AS runs
        FROM webhook_delivery d LEFT JOIN autopilot_run r ON r.webhook_delivery_id = d.id
        WHERE d.status IN ('queued', 'dispatched', 'failed')
        GROUP BY d.id HAVING d.status <> 'dispatched' OR count(r.id) <> 1 OR d.run_id IS NULL""")
    return [f"delivery {r['id']} {r['status']} has {r['runs']} runs" for r in rows]


async def runs_terminal(conn: asyncpg.Connection) -> list[str]:
    """Every run reached a terminal status (the run waits for nothing once the load and faults stopped)."""
    rows = await conn.fetch("SELECT status, count(*) FROM autopilot_run WHERE status <> ALL($1) GROUP BY 1",
                            list(TERMINAL))
    return [f"{r['count']} runs still {r['status']}" for r in rows]


async def occurrences_once(conn: asyncpg.Connection) -> list[str]:
    """Every schedule occurrence fired at most once: one run per (trigger, planned_at), one execution row."""
    runs = await conn.fetch("""SELECT trigger_id, planned_at, count(*) FROM autopilot_run
                               WHERE planned_at IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1""")
    execs = await conn.fetch("""SELECT job_name, scope_id, plan_time, count(*) FROM sys_cron_executions
                                GROUP BY 1, 2, 3 HAVING count(*) > 1""")
    return ([f"trigger {r['trigger_id']} fired {r['count']}x for {r['planned_at']}" for r in runs]
            + [f"{r['job_name']} {r['scope_id']} executed {r['count']}x for {r['plan_time']}" for r in execs])


async def tasks_once(conn: asyncpg.Connection, agent: HttpAgent, runtimes: PullRuntimes) -> list[str]:
    """No task completed twice: one task per run, one applied report per pull task, agents' acks succeeded."""
    found = [f"run {run} pushed as {len(ids)} different tasks" for run, ids in agent.runs.items() if len(ids) > 1]
    found += [f"pull task {t} completed {n}x" for t, n in runtimes.applied.items() if n > 1]
    rows = await conn.fetch("SELECT run_id, count(*) FROM agent_task GROUP BY 1 HAVING count(*) > 1")
    found += [f"run {r['run_id']} has {r['count']} tasks" for r in rows]
    acked = list(agent.acked) + list(runtimes.applied)
    rows = await conn.fetch("SELECT id::text, status FROM agent_task WHERE id::text = ANY($1)", acked)
    found += [f"task {r['id']} done by its agent but {r['status']}" for r in rows if r["status"] != "succeeded"]
    if agent.bad_signatures:
        found.append(f"{agent.bad_signatures} pushes with a bad webhook-signature")
    return found


async def runs_not_failed(conn: asyncpg.Connection) -> list[str]:
    """No run failed: every task got through in the end, however long its agent was down (its work is not lost)."""
    failed = int(await conn.fetchval("SELECT count(*) FROM autopilot_run WHERE status = 'failed'"))
    return [f"{failed} runs failed (lost)"] if failed else []


async def pushes_acknowledged(conn: asyncpg.Connection, agent: HttpAgent, agent_id: str) -> list[str]:
    """The HTTP agent answered 2xx to each of its runs' tasks: distinct ``webhook-id`` answered 2xx = its runs.

    Every succeeded task of the agent was answered 2xx by it (``tasks_once`` checks the converse). The same
    ``webhook-id`` answered 2xx twice is not a breach: a push whose outcome could not be written (its worker
    killed, the database gone) is pushed again under the same id, which is what the id is there to dedupe.
    """
    succeeded = {r["id"] for r in await conn.fetch(
        "SELECT id::text FROM agent_task WHERE agent_id = $1 AND status = 'succeeded'", agent_id)}
    runs = int(await conn.fetchval("""SELECT count(*) FROM autopilot_run r JOIN autopilot a ON a.id = r.autopilot_id
                                      WHERE a.assignee_type = 'agent' AND a.assignee_id = $1""", agent_id))
    unanswered = sorted(succeeded - set(agent.acked))
    found = [f"task {t} succeeded but its agent never answered it 2xx (lost)" for t in unanswered]
    if len(agent.acked) != runs:
        found.append(f"the HTTP agent answered 2xx to {len(agent.acked)} distinct tasks for {runs} runs (lost)")
    return found


async def no_dead_leases(conn: asyncpg.Connection, dead_pids: Iterable[int]) -> list[str]:
    """No task or cron execution is still held by a killed process, and no lease is overdue."""
    holders = [f"{socket.gethostname()}:{pid}" for pid in dead_pids]
    rows = await conn.fetch("""
        SELECT 'task ' || id AS what FROM agent_task WHERE status = 'running'
            AND (holder_instance = ANY($1) OR lease_expires_at < now())
        UNION ALL
        SELECT 'cron ' || job_name || ' ' || scope_id FROM sys_cron_executions WHERE status = 'RUNNING'
            AND stale_after < now()
        UNION ALL
        SELECT 'delivery ' || id FROM webhook_delivery WHERE status = 'queued' AND lease_expires_at < now()""",
        holders)
    return [f"{r['what']} still leased by a dead or overdue holder" for r in rows]


def secrets_not_logged(logs: Iterable[Path], secrets: Iterable[str]) -> list[str]:
    """No token, key or secret handed out during the run appears in any process's output."""
    texts = {log.name: log.read_text(errors="replace") for log in logs}
    return [f"a secret ({secret[:4]}…) appears in {name}" for secret in secrets
            for name, text in texts.items() if secret in text]


def no_prepared_statement_errors(logs: Iterable[Path]) -> list[str]:
    """No process met a prepared statement it had not made, or one made twice (a pooler's classic breakage)."""
    found = []
    for log in logs:
        lines = [line for line in log.read_text(errors="replace").splitlines() if "prepared statement" in line]
        found += [f"{log.name}: {line[:200]}" for line in lines[:3]]
    return found


async def figures(conn: asyncpg.Connection) -> dict[str, Any]:
    """Counts for the summary table."""
    row = await conn.fetchrow("""
        SELECT (SELECT count(*) FROM webhook_delivery) AS deliveries,
               (SELECT coalesce(sum(attempt_count - 1), 0) FROM webhook_delivery) AS retries_deduped,
               (SELECT count(*) FROM webhook_delivery WHERE status = 'rejected') AS rejected,
               (SELECT count(*) FROM autopilot_run) AS runs,
               (SELECT count(*) FROM autopilot_run WHERE source = 'schedule') AS schedule_runs,
               (SELECT count(*) FROM autopilot_run WHERE status = 'completed') AS runs_completed,
               (SELECT count(*) FROM autopilot_run WHERE status = 'failed') AS runs_failed,
               (SELECT count(*) FROM autopilot_run WHERE status = 'skipped') AS runs_skipped,
               (SELECT count(*) FROM audit_log WHERE action = 'EXPIRE') AS leases_expired,
               (SELECT count(*) FROM audit_log WHERE action = 'LATE_RESULT') AS late_results,
               (SELECT count(*) FROM task_attempt) AS task_attempts,
               (SELECT coalesce(string_agg(reason_code || ' ' || n, ', ' ORDER BY reason_code), '-')
                  FROM (SELECT reason_code, count(*) AS n FROM autopilot_run WHERE status = 'skipped'
                         GROUP BY reason_code) s) AS skipped_by_reason,
               (SELECT count(*) FROM autopilot_run WHERE status = 'skipped' AND reason_code = 'runtime_offline'
                  AND created_at < (SELECT min(first_seen_at) FROM agent_instance)) AS skipped_before_a_runtime""")
    assert row is not None
    return dict(row)
