"""``hookgate runs …``, ``tasks …``, ``issues …`` and ``deliveries …``: the work, as it happens.

Runs (start, cancel, retry), the agent tasks they make and their attempts, the issues of ``create_issue``
autopilots, and the webhook deliveries behind them (``deliveries tail`` follows new ones, ``replay-bulk``
replays what filters select).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import uuid
from collections.abc import Iterator
from typing import Any

from hookgate.admin_client import (
    Client,
    cell,
    idempotency,
    instant,
    json_value,
    list_verb,
    noun,
    page,
    request,
    resource_id,
    verb,
)

TASK_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
ISSUE_STATUSES = ("todo", "in_progress", "done", "cancelled")
ATTEMPT_COLUMNS = ("attempt", "outcome", "http_status", "duration_ms", "started_at", "error")


async def runs_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/runs."""
    return await c.call("GET", "/v1/runs", params=page(a, autopilot_id=a.autopilot, status=a.status,
                                                        source=a.source))


runs_get = request("GET", "/v1/runs/{run}")


async def runs_start(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots/{id}/runs (manual: you are the originator)."""
    body = {"source": a.source} | ({"payload": a.payload} if a.payload is not None else {})
    return await c.call("POST", f"/v1/autopilots/{a.autopilot}/runs", json_body=body,
                        headers=idempotency(a))


async def runs_cancel(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/runs/{id}/cancel."""
    return await c.call("POST", f"/v1/runs/{a.run}/cancel", json_body={"reason": a.reason})


async def runs_retry(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/runs/{id}/retry: a failed or cancelled run gets one more task and is queued again."""
    return await c.call("POST", f"/v1/runs/{a.run}/retry", headers=idempotency(a))


tasks_attempts = request("GET", "/v1/tasks/{task}/attempts", paged=True)
tasks_get = request("GET", "/v1/tasks/{task}")


async def tasks_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/tasks."""
    return await c.call("GET", "/v1/tasks", params=page(a, agent_id=a.agent, status=a.status, run_id=a.run))


async def issues_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/issues."""
    return await c.call("GET", "/v1/issues", params=page(a, autopilot_id=a.autopilot, status=a.status))


issues_get = request("GET", "/v1/issues/{issue}")


async def issues_update(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/issues/{id} ``{"status": …}``."""
    return await c.call("PATCH", f"/v1/issues/{a.issue}", json_body={"status": a.status})


async def deliveries_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/deliveries."""
    return await c.call("GET", "/v1/deliveries", params=page(a, trigger_id=a.trigger, status=a.status))


deliveries_get = request("GET", "/v1/deliveries/{delivery}")


async def deliveries_replay(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/deliveries/{id}/replay."""
    return await c.call("POST", f"/v1/deliveries/{a.delivery}/replay",
                        headers=idempotency(a))


async def deliveries_replay_bulk(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/deliveries/replay: replay (or with ``--dry-run`` count) what the filters select."""
    body = {"trigger_id": a.trigger, "autopilot_id": a.autopilot, "status": a.status, "run_status": a.run_status,
            "event": a.event,
            "received_after": a.since, "received_before": a.until, "dry_run": a.dry_run or None, "limit": a.limit}
    return await c.call("POST", "/v1/deliveries/replay", json_body={k: v for k, v in body.items() if v is not None},
                        headers=idempotency(a))




# -- deliveries tail --------------------------------------------------------------------------------

async def deliveries_tail(c: Client, a: argparse.Namespace) -> None:
    """Follow new deliveries: poll the newest page every ``--interval`` s and print each one once, oldest first.

    Ends cleanly on Ctrl-C or SIGTERM (exit 0). Deliveries already there at start are shown only with ``--last``.
    """
    with _stop_on_signals() as stop:
        start = await _newest(c, a, a.last or 1, seen=None)
        seen = Seen(start)
        _show(start[-a.last:] if a.last else [], a.json)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), a.interval)
            if not stop.is_set():
                fresh = await _newest(c, a, 100, seen=seen)
                seen.add(fresh)
                _show(fresh, a.json)


class Seen:
    """What a tail printed or found at start; the newest ``keep`` ids are enough to recognise the first pages."""

    def __init__(self, start: list[dict[str, Any]], keep: int = 5000) -> None:
        self.ids = dict.fromkeys(d["id"] for d in start)
        self.keep = keep
        # Deliveries older than the oldest found at start are history: never printed (ids grow with time).
        self.floor = min((uuid.UUID(d["id"]) for d in start), default=None)

    def add(self, items: list[dict[str, Any]]) -> None:
        """Remember ``items``; forget the oldest ids beyond ``keep``."""
        self.ids.update(dict.fromkeys(d["id"] for d in items))
        while len(self.ids) > self.keep:
            del self.ids[next(iter(self.ids))]

    def new(self, item: dict[str, Any]) -> bool:
        """Not printed yet and newer than where the tail started."""
        return item["id"] not in self.ids and (self.floor is None or uuid.UUID(item["id"]) > self.floor)


async def _newest(c: Client, a: argparse.Namespace, limit: int, seen: Seen | None) -> list[dict[str, Any]]:
    """The deliveries not seen yet, oldest first; follows the cursor while a whole page is new (a burst)."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await c.call("GET", "/v1/deliveries", params={"trigger_id": a.trigger, "status": a.status,
                                                             "limit": limit, "cursor": cursor})
        items = page["items"] if seen is None else [d for d in page["items"] if seen.new(d)]
        found.extend(items)
        cursor = page.get("next_cursor")
        if seen is None or not cursor or len(items) < len(page["items"]):
            return found[::-1]


def _show(items: list[dict[str, Any]], as_json: bool) -> None:
    for d in items:
        if as_json:
            print(json.dumps(d), flush=True)
        else:
            print("  ".join(cell(d.get(k)) for k in ("received_at", "status", "signature_status", "event", "id",
                                                    "run_id")), flush=True)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[asyncio.Event]:
    """An event set by SIGINT or SIGTERM while the block runs: a follower ends cleanly instead of by a traceback."""
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


# -- parser ------------------------------------------------------------------------------------------

RUN_STATUSES = ("pending", "issue_created", "queued", "running", "completed", "failed", "cancelled", "skipped")


def _runs(sub: Any) -> None:
    runs = noun(sub, "runs", "list, show, start, cancel and retry runs")
    p = list_verb(runs, runs_list, "list runs, newest first", "list_runs")
    p.add_argument("--autopilot", type=resource_id("autopilot"))
    p.add_argument("--status", choices=RUN_STATUSES)
    p.add_argument("--source", choices=("manual", "schedule", "webhook", "api"))
    verb(runs, "get", runs_get, "show a run, its chain (delivery → run → issue → task), its attempt, next "
          "attempt, last error and latest attempt", "get_run").add_argument("run", type=resource_id("run"))
    p = verb(runs, "start", runs_start, "start a run of an autopilot by hand", "create_run")
    p.add_argument("autopilot", type=resource_id("autopilot"))
    p.add_argument("--payload", type=json_value, help="JSON object passed to the agent")
    p.add_argument("--source", choices=("manual", "api"), default="manual")
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes starts one run")
    p = verb(runs, "cancel", runs_cancel, "end an unfinished run and cancel its queued tasks (409 if finished)",
             "cancel_run")
    p.add_argument("run", type=resource_id("run"))
    p.add_argument("--reason", help="why (kept on the run)")
    p = verb(runs, "retry", runs_retry, "give a failed or cancelled run one more task and queue it again "
              "(409 for any other run)", "retry_run")
    p.add_argument("run", type=resource_id("run"))
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes retries once")


def _tasks(sub: Any) -> None:
    tasks = noun(sub, "tasks", "list and show agent tasks, and a task's attempts (push attempts and pull outcomes)")
    p = list_verb(tasks, tasks_list, "list agent tasks, newest first", "list_tasks")
    p.add_argument("--agent", type=resource_id("agent"))
    p.add_argument("--status", choices=TASK_STATUSES)
    p.add_argument("--run", type=resource_id("run"))
    verb(tasks, "get", tasks_get, "show a task: status, attempt, lease, next attempt, last error and result",
         "get_task").add_argument("task", type=resource_id("task"))
    list_verb(tasks, tasks_attempts, "list a task's attempts, oldest first: outcome, HTTP status, duration, start, "
              "error (the agent's answer with --json, for the autopilot's writers)", "list_attempts",
              name="attempts", columns=ATTEMPT_COLUMNS).add_argument("task", type=resource_id("task"))


def _issues(sub: Any) -> None:
    issues = noun(sub, "issues", "list, show and close the issues runs create (execution mode create_issue)")
    p = list_verb(issues, issues_list, "list issues, newest first", "list_issues")
    p.add_argument("--autopilot", type=resource_id("autopilot"))
    p.add_argument("--status", choices=ISSUE_STATUSES)
    verb(issues, "get", issues_get, "show an issue", "get_issue").add_argument("issue", type=resource_id("issue"))
    p = verb(issues, "update", issues_update, "change an issue's status (writers of its autopilot); done or "
             "cancelled ends its run", "update_issue")
    p.add_argument("issue", type=resource_id("issue"))
    p.add_argument("--status", required=True, choices=ISSUE_STATUSES)


DELIVERY_STATUSES = ("queued", "dispatched", "rejected", "ignored", "failed")
REPLAYABLE_STATUSES = tuple(s for s in DELIVERY_STATUSES if s != "rejected")


def _deliveries(sub: Any) -> None:
    deliveries = noun(sub, "deliveries", "list, show, follow and replay webhook deliveries")
    p = list_verb(deliveries, deliveries_list, "list deliveries, newest first", "list_deliveries")
    p.add_argument("--trigger", type=resource_id("trigger"))
    p.add_argument("--status", choices=DELIVERY_STATUSES)
    verb(deliveries, "get", deliveries_get, "show a delivery with its headers, body and envelope",
         "get_delivery").add_argument(
        "delivery", type=resource_id("delivery"))
    p = verb(deliveries, "tail", deliveries_tail, "follow new deliveries as they arrive, one line each "
              "(JSON lines with --json); Ctrl-C ends it", "list_deliveries")
    p.add_argument("--trigger", type=resource_id("trigger"))
    p.add_argument("--status", choices=DELIVERY_STATUSES)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")
    p.add_argument("--last", type=int, default=0, metavar="N", help="first show the N newest (default 0)")
    p = verb(deliveries, "replay", deliveries_replay, "replay a delivery as a new one (runs it again)",
             "replay_delivery")
    p.add_argument("delivery", type=resource_id("delivery"))
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes replays once")
    p = verb(deliveries, "replay-bulk", deliveries_replay_bulk, "replay every delivery the filters select, "
              "oldest first, each like 'replay' (at least one filter; try --dry-run first)",
             "replay_deliveries")
    p.add_argument("--trigger", type=resource_id("trigger"))
    p.add_argument("--autopilot", type=resource_id("autopilot"))
    p.add_argument("--status", action="append", choices=REPLAYABLE_STATUSES, help="the delivery's; repeatable")
    p.add_argument("--run-status", action="append", choices=RUN_STATUSES, help="its run's, e.g. failed; repeatable")
    p.add_argument("--event", help="exact event name, e.g. github.push")
    p.add_argument("--since", type=instant, help="received at or after: ISO 8601 with a zone, or 30m/2h/1d ago")
    p.add_argument("--until", type=instant, help="received before: ISO 8601 with a zone, or 30m/2h/1d ago")
    p.add_argument("--limit", type=int, help="at most this many (default 1000, max 10000)")
    p.add_argument("--dry-run", action="store_true", help="only count and list the deliveries it would replay")
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes replays once")


def add_commands(sub: Any) -> None:
    """Add ``runs``, ``tasks``, ``issues`` and ``deliveries``."""
    for add in (_runs, _tasks, _issues, _deliveries):
        add(sub)
