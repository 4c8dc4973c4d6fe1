"""Admin verbs of the ``hookgate`` command: thin HTTP clients of the admin API (ARCHITECTURE §2, §11).

``hookgate agents …``, ``autopilots …``, ``triggers …``, ``runs …`` (``retry`` gives a failed or cancelled
run another task), ``tasks attempts``, ``deliveries …`` (``tail`` follows new ones, ``replay-bulk`` replays
what filters select), ``members …``, ``keys …`` and ``channels …`` (notification channels). Readable tables
by default (a run and an agent read as their delivery state: attempt, next attempt, last error; health and
retry schedule), the API's JSON with ``--json``. Every verb takes ``--url`` and ``--key`` (env ``HOOKGATE_URL``, else
``http://HOOKGATE_HOST:HOOKGATE_PORT``, and ``HOOKGATE_API_KEY``).

Exit codes: 0 done; 1 the API refused (one line: ``hookgate: error: 404 not_found: no such run``); 2 the
request was never answered: bad input, no key, a malformed id, bad client settings, the gateway unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import httpx
from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from hookgate import retry

Verb = Callable[["Client", argparse.Namespace], Awaitable[Any]]


class ClientSettings(BaseSettings):
    """Where the gateway is and which credential to use (``HOOKGATE_URL``, ``HOOKGATE_API_KEY``, …)."""

    model_config = SettingsConfigDict(env_prefix="HOOKGATE_", extra="ignore")
    url: str | None = Field(default=None, description="Base URL of a Hookgate gateway (default from host and port)")
    host: str = Field(default="127.0.0.1", description="The gateway's bind address, when HOOKGATE_URL is unset")
    port: int = Field(default=8080, ge=1, le=65535, description="The gateway's port, when HOOKGATE_URL is unset")
    api_key: SecretStr | None = Field(default=None, description="An hgk_ admin API key")
    runtime_token: SecretStr | None = Field(default=None, description="A pull agent's hgr_ token (hookgate listen)")

    def base_url(self) -> str:
        """``HOOKGATE_URL``, else the address the gateway of this environment binds (a wildcard read as loopback)."""
        if self.url:
            return self.url.rstrip("/")
        host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``hookgate: error: <message>`` (one line) and exit with ``code``."""
    print(f"hookgate: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    raise SystemExit(code)


@contextlib.contextmanager
def exit_on_failure(url: str) -> Iterator[None]:
    """Exit 1 when the API refuses (:class:`ApiFailure`), 2 when ``url`` never answered."""
    try:
        yield
    except ApiFailure as exc:
        fail(str(exc), 1)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        fail(f"cannot reach {url}: {exc.__class__.__name__}")


def client_settings() -> ClientSettings:
    """The client's settings from the environment; a bad one is one error line and exit 2."""
    try:
        return ClientSettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "HOOKGATE_" + "_".join(str(p) for p in first["loc"]).upper()
        fail(f"{name}: {first['msg']}")


def resource_id(noun: str) -> Callable[[str], str]:
    """An argparse type: the id of a ``noun``, a UUID, refused before any request when malformed."""
    def parse(text: str) -> str:
        try:
            return str(uuid.UUID(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {noun} id (a UUID): {text!r}") from None
    parse.__name__ = f"{noun}_id"
    return parse


def json_value(text: str) -> Any:
    """An argparse type: a JSON document, refused before any request when it does not parse."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None


_UNITS = {"m": 60, "h": 3600, "d": 86400}


#: What ``--retry-schedule default`` sends: null, the gateway's HOOKGATE_PUSH_RETRY_SCHEDULE again.
DEFAULT_SCHEDULE = "default"


def retry_schedule(text: str) -> list[float] | str:
    """An argparse type: ``5s,1m,1h`` as seconds (``retry.Schedule.parse``), or ``default``; checked before sending."""
    if text.strip().lower() == DEFAULT_SCHEDULE:
        return DEFAULT_SCHEDULE
    try:
        return list(retry.Schedule.parse(text).delays)
    except retry.ScheduleError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def instant(text: str) -> str:
    """An argparse type: an ISO 8601 time with its zone, or a span ago; sent as ISO 8601.

    ``2026-03-01T12:00:00Z``, ``2026-03-01T13:00+01:00``; ``90m``, ``2h``, ``1d`` ago by this machine's clock.
    A time without a zone is refused before any request (it would be read in an unknown zone).
    """
    if text[:-1].isdigit() and text[-1:] in _UNITS:
        return (datetime.now(UTC) - timedelta(seconds=int(text[:-1]) * _UNITS[text[-1]])).isoformat()
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time (ISO 8601, or 30m/2h/1d ago): {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone, e.g. {text}Z: {text!r}")
    return when.isoformat()


class ApiFailure(Exception):
    """The API answered an error: its status, code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")


class Client:
    """One admin API session."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def call(self, method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> Any:
        """Send one request; the decoded JSON answer, or :class:`ApiFailure`."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        answer = await self.http.request(method, path, json=json_body, params=query, headers=headers)
        try:
            body = answer.json()
        except ValueError:
            raise ApiFailure(answer.status_code, "bad_response", "not a JSON answer: is this a Hookgate gateway?"
                             ) from None
        if answer.status_code >= 400:
            error = body if isinstance(body, dict) else {}
            raise ApiFailure(answer.status_code, str(error.get("error", "error")), str(error.get("message", "")))
        return body




# ---------------------------------------------------------------------------------------------------
# Verbs
# ---------------------------------------------------------------------------------------------------

def _page(a: argparse.Namespace, **filters: Any) -> dict[str, Any]:
    """The query of a list verb: its filters, ``--limit`` and ``--cursor``."""
    return filters | {"limit": a.limit, "cursor": a.cursor}


def _request(method: str, path: str, *, paged: bool = False) -> Verb:
    """A verb that just sends ``method`` to ``path``, its ``{names}`` from the arguments (paged: the list options)."""

    async def verb(c: Client, a: argparse.Namespace) -> Any:
        return await c.call(method, path.format_map(vars(a)), params=_page(a) if paged else None)

    return verb


def _idempotency(a: argparse.Namespace) -> dict[str, str] | None:
    """The ``Idempotency-Key`` header of a POST verb, if ``--idempotency-key`` was given."""
    return {"Idempotency-Key": a.idempotency_key} if a.idempotency_key else None


async def agents_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/agents."""
    runtime = {"kind": "pull"} if a.pull else {"kind": "http", "url": a.endpoint, "timeout_s": a.timeout}
    body = {"name": a.name, "runtime": runtime, "visibility": "private" if a.private else "workspace",
            "max_concurrency": a.max_concurrency}
    if a.retry_schedule not in (None, DEFAULT_SCHEDULE):
        body["retry_schedule"] = a.retry_schedule
    return await c.call("POST", "/v1/agents", json_body=body)


agents_list = _request("GET", "/v1/agents", paged=True)
agents_get = _request("GET", "/v1/agents/{agent}")


async def agents_update(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/agents/{id} with the fields given (``--retry-schedule default`` sends ``null``)."""
    body = {"name": a.name, "url": a.endpoint, "timeout_s": a.timeout, "max_concurrency": a.max_concurrency,
            "visibility": a.visibility}
    sent: dict[str, Any] = {k: v for k, v in body.items() if v is not None}
    if a.retry_schedule is not None:
        sent["retry_schedule"] = None if a.retry_schedule == DEFAULT_SCHEDULE else a.retry_schedule
    return await c.call("PATCH", f"/v1/agents/{a.agent}", json_body=sent)


agents_rotate_secret = _request("POST", "/v1/agents/{agent}/rotate-secret")


async def autopilots_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots."""
    assignee = {"type": "squad", "id": a.squad} if a.squad else {"type": "agent", "id": a.agent}
    return await c.call("POST", "/v1/autopilots", json_body={
        "title": a.title, "instructions": a.instructions, "assignee": assignee, "execution_mode": a.mode})


async def autopilots_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/autopilots."""
    return await c.call("GET", "/v1/autopilots", params=_page(a, status=a.status))


async def triggers_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots/{id}/triggers (webhook unless --cron is given)."""
    if a.cron:
        body: dict[str, Any] = {"kind": "schedule", "cron": a.cron, "timezone": a.timezone,
                                "overlap_policy": a.overlap}
    else:
        body = {"kind": "webhook", "provider": a.provider, "event_filters": a.event or []}
    return await c.call("POST", f"/v1/autopilots/{a.autopilot}/triggers", json_body=body)


triggers_list = _request("GET", "/v1/autopilots/{autopilot}/triggers", paged=True)
triggers_get = _request("GET", "/v1/triggers/{trigger}")


async def triggers_pause(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/triggers/{id} ``{"enabled": false}``."""
    return await c.call("PATCH", f"/v1/triggers/{a.trigger}", json_body={"enabled": False})


async def triggers_resume(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/triggers/{id} ``{"enabled": true}``."""
    return await c.call("PATCH", f"/v1/triggers/{a.trigger}", json_body={"enabled": True})


triggers_rotate = _request("POST", "/v1/triggers/{trigger}/rotate-token")


async def triggers_set_secret(c: Client, a: argparse.Namespace) -> Any:
    """PUT /v1/triggers/{id}/signing-secret (or DELETE with --remove)."""
    if a.remove:
        return await c.call("DELETE", f"/v1/triggers/{a.trigger}/signing-secret")
    secret = a.secret if a.secret is not None else sys.stdin.readline().rstrip("\r\n")  # spaces belong to it
    return await c.call("PUT", f"/v1/triggers/{a.trigger}/signing-secret",
                        json_body={"secret": secret, "grace_seconds": a.grace})


async def runs_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/runs."""
    return await c.call("GET", "/v1/runs", params=_page(a, autopilot_id=a.autopilot, status=a.status,
                                                        source=a.source))


runs_get = _request("GET", "/v1/runs/{run}")


async def runs_start(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots/{id}/runs (manual: you are the originator)."""
    body = {"source": a.source} | ({"payload": a.payload} if a.payload is not None else {})
    return await c.call("POST", f"/v1/autopilots/{a.autopilot}/runs", json_body=body,
                        headers=_idempotency(a))


async def runs_cancel(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/runs/{id}/cancel."""
    return await c.call("POST", f"/v1/runs/{a.run}/cancel", json_body={"reason": a.reason})


async def runs_retry(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/runs/{id}/retry: a failed or cancelled run gets one more task and is queued again."""
    return await c.call("POST", f"/v1/runs/{a.run}/retry", headers=_idempotency(a))


tasks_attempts = _request("GET", "/v1/tasks/{task}/attempts", paged=True)


async def channels_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/notification-channels (the answer holds the whsec_ signing secret, shown once)."""
    return await c.call("POST", "/v1/notification-channels",
                        json_body={"name": a.name, "url": a.endpoint, "events": a.event})


channels_list = _request("GET", "/v1/notification-channels", paged=True)
channels_get = _request("GET", "/v1/notification-channels/{channel}")
channels_delete = _request("DELETE", "/v1/notification-channels/{channel}")
channels_test = _request("POST", "/v1/notification-channels/{channel}/test")


async def deliveries_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/deliveries."""
    return await c.call("GET", "/v1/deliveries", params=_page(a, trigger_id=a.trigger, status=a.status))


deliveries_get = _request("GET", "/v1/deliveries/{delivery}")


async def deliveries_replay(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/deliveries/{id}/replay."""
    return await c.call("POST", f"/v1/deliveries/{a.delivery}/replay",
                        headers=_idempotency(a))


async def deliveries_replay_bulk(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/deliveries/replay: replay (or with ``--dry-run`` count) what the filters select."""
    body = {"trigger_id": a.trigger, "autopilot_id": a.autopilot, "status": a.status, "run_status": a.run_status,
            "event": a.event,
            "received_after": a.since, "received_before": a.until, "dry_run": a.dry_run or None, "limit": a.limit}
    return await c.call("POST", "/v1/deliveries/replay", json_body={k: v for k, v in body.items() if v is not None},
                        headers=_idempotency(a))


members_list = _request("GET", "/v1/members", paged=True)
members_get = _request("GET", "/v1/members/{member}")


async def members_update(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/members/{id} with ``role`` and/or ``disabled``."""
    body = {"role": a.role, "disabled": a.disabled}
    return await c.call("PATCH", f"/v1/members/{a.member}", json_body={k: v for k, v in body.items() if v is not None})


async def keys_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/keys (yours, or a member's within your reach)."""
    return await c.call("GET", "/v1/keys", params=_page(a, member_id=a.member))


keys_revoke = _request("DELETE", "/v1/keys/{key_id}")


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
            print("  ".join(_cell(d.get(k)) for k in ("received_at", "status", "signature_status", "event", "id",
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


# ---------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------

COLUMNS = {
    "agents": ("id", "name", "runtime.kind", "runtime.url", "visibility", "health.state", "archived_at"),
    "autopilots": ("id", "title", "status", "execution_mode", "assignee.type", "version"),
    "triggers": ("id", "kind", "enabled", "provider", "rate_limit_per_minute", "cron", "event_filters",
                 "next_fire_at"),
    "runs": ("id", "source", "status", "autopilot_id", "reason_code", "created_at"),
    "deliveries": ("id", "status", "reason_code", "signature_status", "event", "run_id", "received_at"),
    "members": ("id", "name", "email", "role", "disabled_at"),
    "keys": ("id", "member_id", "hint", "last_used_at", "revoked_at"),
    "tasks": ("attempt", "outcome", "http_status", "duration_ms", "started_at", "error"),
    "channels": ("id", "name", "url", "events", "secret_hint", "created_at"),
}


def _get(item: dict[str, Any], dotted: str) -> Any:
    value: Any = item
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def table(items: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """Aligned columns with a header row."""
    rows = [[c.upper().replace(".", " ") for c in columns]] + [[_cell(_get(i, c)) for c in columns] for i in items]
    widths = [max(len(r[n]) for r in rows) for n in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def record(item: dict[str, Any]) -> str:
    """One object as ``key  value`` lines (nested objects as JSON)."""
    width = max((len(k) for k in item), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in item.items())


def schedule_text(delays: list[float] | None) -> str:
    """An agent's ``retry_schedule`` as written in settings (``5s,1m,1h``, n + 1 attempts), or ``default``."""
    if delays is None:
        return "default (the gateway's HOOKGATE_PUSH_RETRY_SCHEDULE)"
    schedule = retry.Schedule(tuple(delays))
    return f"{schedule.text()} ({schedule.attempts} attempts)"


def _agent_lines(agent: dict[str, Any]) -> dict[str, Any]:
    """An agent with its health spelled out (state, since, next probe, failures, last error) and its schedule."""
    health = agent.get("health") or {}
    spelled = {"health": health.get("state"), "health_since": health.get("since"),
               "next_probe_at": health.get("next_probe_at"), "failures": health.get("failures"),
               "last_error": health.get("last_error")}
    out = {k: v for k, v in agent.items() if k not in ("health", "retry_schedule")}
    return out | spelled | {"retry_schedule": schedule_text(agent.get("retry_schedule"))}


def attempt_line(attempt: dict[str, Any] | None) -> str | None:
    """One attempt in a line: ``#2 failed, HTTP 502, 120 ms, started …: error``."""
    if not attempt:
        return None
    parts = [f"#{attempt['attempt']} {attempt['outcome']}"]
    if attempt.get("http_status") is not None:
        parts.append(f"HTTP {attempt['http_status']}")
    parts += [f"{attempt['duration_ms']} ms", f"started {attempt['started_at']}"]
    error = attempt.get("error")
    return ", ".join(parts) + (f": {error}" if error else "")


def _run_lines(run: dict[str, Any]) -> dict[str, Any]:
    """A run with its latest attempt in one line; a retried run's names its task (``task 2, #1 failed, …``).

    The attempt count, next attempt and last error stay as they are. After a retry the attempt numbers start
    again with the new task: "task 2" tells its attempts from the failed task's.
    """
    if "latest_attempt" not in run:
        return run
    line = attempt_line(run["latest_attempt"])
    if line is not None and (run.get("run_attempt") or 0) > 1:
        line = f"task {run['run_attempt']}, {line}"
    return run | {"latest_attempt": line}


#: How one object of a noun reads (default: its fields as they are).
READABLE: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"agents": _agent_lines, "runs": _run_lines}


def render(noun: str, answer: Any) -> str:
    """The readable form of an answer: a table for lists, key/value lines for one object."""
    if isinstance(answer, dict) and "items" in answer:
        text = table(answer["items"], COLUMNS[noun])
        return text + (f"\n(more: --cursor {answer['next_cursor']})" if answer.get("next_cursor") else "")
    readable = READABLE.get(noun)
    if readable is not None and isinstance(answer, dict) and "id" in answer:
        answer = readable(answer)
    return record(answer)


# ---------------------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------------------

ENV_HELP = ("env HOOKGATE_URL (default http://HOOKGATE_HOST:HOOKGATE_PORT) / HOOKGATE_API_KEY supply --url / --key; "
            "exit 1 when the API refuses, 2 when the request is not answered (bad input, unreachable)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="gateway base URL (env HOOKGATE_URL, default http://127.0.0.1:8080 from "
                                 "HOOKGATE_HOST and HOOKGATE_PORT)")
    p.add_argument("--key", help="admin API key hgk_… (env HOOKGATE_API_KEY)")
    p.add_argument("--json", action="store_true", help="print the API's JSON answer instead of a table")


def _verb(nouns: Any, name: str, fn: Verb, text: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = nouns.add_parser(name, help=text, description=text, epilog=ENV_HELP)
    _common(p)
    p.set_defaults(admin_verb=fn)
    return p


def _list(nouns: Any, fn: Verb, text: str) -> argparse.ArgumentParser:
    p = _verb(nouns, "list", fn, text)
    p.add_argument("--limit", type=int, default=50, help="page size (default 50, max 500)")
    p.add_argument("--cursor", help="the next page: the cursor a previous list printed")
    return p


def _noun(sub: Any, name: str, text: str) -> Any:
    return sub.add_parser(name, help=text, description=text).add_subparsers(dest="verb", required=True,
                                                                              metavar="VERB")


def _agents(sub: Any) -> None:
    agents = _noun(sub, "agents", "create, list, show and change agents (admin API client)")
    p = _verb(agents, "create", agents_create, "create an http agent (--endpoint) or a pull agent (--pull)")
    p.add_argument("--name", required=True, help="agent name")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--endpoint", help="URL we push tasks to (http agent)")
    kind.add_argument("--pull", action="store_true", help="a runtime that pulls work with an hgr_ token")
    p.add_argument("--timeout", type=float, default=10.0, help="push timeout in seconds (default 10)")
    p.add_argument("--private", action="store_true", help="only you may assign work to it")
    p.add_argument("--max-concurrency", type=int, default=4, help="tasks at once (default 4)")
    p.add_argument("--retry-schedule", type=retry_schedule, metavar="DELAYS",
                   help="its own delays between attempts, e.g. 5s,1m,1h (n delays: n + 1 attempts); "
                        "default: the gateway's HOOKGATE_PUSH_RETRY_SCHEDULE")
    _list(agents, agents_list, "list agents")
    _verb(agents, "get", agents_get, "show an agent, its health (state, since, next probe, last error) and "
          "its retry schedule").add_argument("agent", type=resource_id("agent"))
    p = _verb(agents, "update", agents_update, "change an agent's name, endpoint, timeout, concurrency, visibility, "
              "retry schedule")
    p.add_argument("agent", type=resource_id("agent"))
    p.add_argument("--name", help="new name")
    p.add_argument("--endpoint", help="new URL we push tasks to (http agent; checked like at creation)")
    p.add_argument("--timeout", type=float, help="push timeout in seconds (http agent)")
    p.add_argument("--max-concurrency", type=int, help="tasks at once (running ones are never cut)")
    seen = p.add_mutually_exclusive_group()
    seen.add_argument("--private", dest="visibility", action="store_const", const="private",
                      help="only you may assign work to it")
    seen.add_argument("--workspace", dest="visibility", action="store_const", const="workspace",
                      help="every member may assign work to it")
    p.add_argument("--retry-schedule", type=retry_schedule, metavar="DELAYS",
                   help="delays between attempts of its tasks, e.g. 5s,1m,1h (units s, m, h, d; n delays: n + 1 "
                        "attempts); 'default' goes back to the gateway's HOOKGATE_PUSH_RETRY_SCHEDULE")
    _verb(agents, "rotate-secret", agents_rotate_secret,
          "give an http agent a new signing secret (shown once); the old one also signs pushes for 24 hours"
          ).add_argument("agent", type=resource_id("agent"))


def _autopilots(sub: Any) -> None:
    autopilots = _noun(sub, "autopilots", "create and list autopilots (admin API client)")
    p = _verb(autopilots, "create", autopilots_create, "create an autopilot assigned to an agent or a squad")
    p.add_argument("--title", required=True, help="autopilot title")
    p.add_argument("--instructions", default="", help="what the agent should do")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--agent", type=resource_id("agent"), help="assignee agent id")
    who.add_argument("--squad", type=resource_id("squad"), help="assignee squad id (its leader does the work)")
    p.add_argument("--mode", choices=("run_only", "create_issue"), default="create_issue",
                   help="create an issue per run (default) or run the agent directly")
    _list(autopilots, autopilots_list, "list autopilots").add_argument(
        "--status", choices=("active", "paused", "archived"))


def _triggers(sub: Any) -> None:
    triggers = _noun(sub, "triggers", "create, list, pause and resume triggers; rotate tokens, set secrets")
    trigger_id = resource_id("trigger")
    p = _verb(triggers, "create", triggers_create, "create a webhook trigger, or a schedule with --cron")
    p.add_argument("--autopilot", required=True, type=resource_id("autopilot"), help="autopilot id")
    p.add_argument("--provider", default="generic", help="webhook preset: generic, github, stripe, … (webhook)")
    p.add_argument("--event", action="append", help="event filter, repeatable, * wildcards (webhook)")
    p.add_argument("--cron", help="5-field cron expression: makes a schedule trigger")
    p.add_argument("--timezone", default="UTC", help="IANA zone the cron is read in (schedule)")
    p.add_argument("--overlap", choices=("skip", "buffer_one", "allow"), default="skip",
                   help="what an occurrence does while the previous run is active (schedule)")
    _list(triggers, triggers_list, "list an autopilot's live triggers, oldest first").add_argument(
        "--autopilot", required=True, type=resource_id("autopilot"), help="autopilot id")
    _verb(triggers, "get", triggers_get, "show a trigger (its token and URL only if you may edit it)"
          ).add_argument("trigger", type=trigger_id)
    _verb(triggers, "pause", triggers_pause, "disable a trigger: its webhooks are ignored (trigger_disabled), "
          "its schedule stops firing").add_argument("trigger", type=trigger_id)
    _verb(triggers, "resume", triggers_resume, "enable a trigger again (a schedule plans its next fire from now)"
          ).add_argument("trigger", type=trigger_id)
    _verb(triggers, "rotate-token", triggers_rotate, "give a webhook trigger a new token; the old URL answers 404"
          ).add_argument("trigger", type=trigger_id)
    p = _verb(triggers, "set-secret", triggers_set_secret, "set (or --remove) a webhook trigger's signing secret")
    p.add_argument("trigger", type=trigger_id)
    p.add_argument("--secret", help="the provider's signing secret (read from stdin when omitted)")
    p.add_argument("--grace", type=int, default=0, help="seconds the previous secret still verifies")
    p.add_argument("--remove", action="store_true", help="remove the secret (bearer-only mode)")


RUN_STATUSES = ("pending", "issue_created", "queued", "running", "completed", "failed", "cancelled", "skipped")


def _runs(sub: Any) -> None:
    runs = _noun(sub, "runs", "list, show, start, cancel and retry runs")
    p = _list(runs, runs_list, "list runs, newest first")
    p.add_argument("--autopilot", type=resource_id("autopilot"))
    p.add_argument("--status", choices=RUN_STATUSES)
    p.add_argument("--source", choices=("manual", "schedule", "webhook", "api"))
    _verb(runs, "get", runs_get, "show a run, its chain (delivery → run → issue → task), its attempt, next "
          "attempt, last error and latest attempt").add_argument("run", type=resource_id("run"))
    p = _verb(runs, "start", runs_start, "start a run of an autopilot by hand")
    p.add_argument("autopilot", type=resource_id("autopilot"))
    p.add_argument("--payload", type=json_value, help="JSON object passed to the agent")
    p.add_argument("--source", choices=("manual", "api"), default="manual")
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes starts one run")
    p = _verb(runs, "cancel", runs_cancel, "end an unfinished run and cancel its queued tasks (409 if finished)")
    p.add_argument("run", type=resource_id("run"))
    p.add_argument("--reason", help="why (kept on the run)")
    p = _verb(runs, "retry", runs_retry, "give a failed or cancelled run one more task and queue it again "
              "(409 for any other run)")
    p.add_argument("run", type=resource_id("run"))
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes retries once")


def _tasks(sub: Any) -> None:
    tasks = _noun(sub, "tasks", "a task's attempts (push attempts and pull outcomes)")
    p = _verb(tasks, "attempts", tasks_attempts, "list a task's attempts, oldest first: outcome, HTTP status, "
              "duration, start, error (the agent's answer with --json, for the autopilot's writers)")
    p.add_argument("task", type=resource_id("task"))
    p.add_argument("--limit", type=int, default=50, help="page size (default 50, max 500)")
    p.add_argument("--cursor", help="the next page: the cursor a previous call printed")


CHANNEL_EVENTS = ("run.failed", "agent.unhealthy", "agent.recovered", "autopilot.paused", "trigger.rejections_spike")


def _channels(sub: Any) -> None:
    channels = _noun(sub, "channels", "notification channels: where alerts are sent (owners and admins)")
    channel_id = resource_id("channel")
    p = _verb(channels, "create", channels_create, "create a channel; prints its whsec_ signing secret once")
    p.add_argument("--name", required=True, help="channel name")
    p.add_argument("--endpoint", required=True, help="URL alerts are POSTed to (checked by the egress policy)")
    p.add_argument("--event", action="append", required=True, choices=CHANNEL_EVENTS,
                   help="an event it hears; repeatable")
    _list(channels, channels_list, "list notification channels, oldest first")
    _verb(channels, "get", channels_get, "show a channel").add_argument("channel", type=channel_id)
    _verb(channels, "delete", channels_delete, "delete a channel and its notifications").add_argument(
        "channel", type=channel_id)
    _verb(channels, "test", channels_test, "queue a ping to a channel (sent and retried like any alert)"
          ).add_argument("channel", type=channel_id)


DELIVERY_STATUSES = ("queued", "dispatched", "rejected", "ignored", "failed")
REPLAYABLE_STATUSES = tuple(s for s in DELIVERY_STATUSES if s != "rejected")


def _deliveries(sub: Any) -> None:
    deliveries = _noun(sub, "deliveries", "list, show, follow and replay webhook deliveries")
    p = _list(deliveries, deliveries_list, "list deliveries, newest first")
    p.add_argument("--trigger", type=resource_id("trigger"))
    p.add_argument("--status", choices=DELIVERY_STATUSES)
    _verb(deliveries, "get", deliveries_get, "show a delivery with its headers, body and envelope").add_argument(
        "delivery", type=resource_id("delivery"))
    p = _verb(deliveries, "tail", deliveries_tail, "follow new deliveries as they arrive, one line each "
              "(JSON lines with --json); Ctrl-C ends it")
    p.add_argument("--trigger", type=resource_id("trigger"))
    p.add_argument("--status", choices=DELIVERY_STATUSES)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")
    p.add_argument("--last", type=int, default=0, metavar="N", help="first show the N newest (default 0)")
    p = _verb(deliveries, "replay", deliveries_replay, "replay a delivery as a new one (runs it again)")
    p.add_argument("delivery", type=resource_id("delivery"))
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes replays once")
    p = _verb(deliveries, "replay-bulk", deliveries_replay_bulk, "replay every delivery the filters select, "
              "oldest first, each like 'replay' (at least one filter; try --dry-run first)")
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


def _members(sub: Any) -> None:
    members = _noun(sub, "members", "list, show and change workspace members")
    _list(members, members_list, "list members")
    _verb(members, "get", members_get, "show a member").add_argument("member", type=resource_id("member"))
    p = _verb(members, "update", members_update, "change a member's role, or disable/enable them")
    p.add_argument("member", type=resource_id("member"))
    p.add_argument("--role", choices=("owner", "admin", "member"))
    state = p.add_mutually_exclusive_group()
    state.add_argument("--disable", dest="disabled", action="store_const", const=True,
                       help="their keys answer 401 until enabled (not revoked)")
    state.add_argument("--enable", dest="disabled", action="store_const", const=False, help="enable again")


def _keys(sub: Any) -> None:
    keys = _noun(sub, "keys", "list and revoke admin API keys")
    _list(keys, keys_list, "list your keys, or a member's within your reach").add_argument(
        "--member", type=resource_id("member"), help="a member's keys")
    _verb(keys, "revoke", keys_revoke, "revoke a key: it stops working on the next request").add_argument(
        "key_id", metavar="KEY_ID", type=resource_id("key"))


def add_commands(sub: Any) -> None:
    """Add the admin nouns and their verbs to the ``hookgate`` command tree."""
    for add in (_agents, _autopilots, _triggers, _runs, _tasks, _deliveries, _members, _keys, _channels):
        add(sub)


async def run(args: argparse.Namespace) -> None:
    """Run one admin verb and print its answer; exit 1 when the API refuses, 2 when it never answered."""
    settings = client_settings()
    url = (args.url or settings.base_url()).rstrip("/")
    key = args.key or (settings.api_key.get_secret_value() if settings.api_key else None)
    if not key:
        fail("no API key: pass --key or set HOOKGATE_API_KEY")
    headers = {"Authorization": f"Bearer {key}", "User-Agent": "hookgate-cli"}
    with exit_on_failure(url):
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            answer = await args.admin_verb(Client(http), args)
    if answer is not None:
        print(json.dumps(answer, indent=2) if args.json else render(args.command, answer))
