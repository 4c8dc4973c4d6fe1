"""The admin verbs of the ``hookgate`` command: thin HTTP clients of the admin API (ARCHITECTURE §2, §11).

This module holds what every verb shares: where the gateway is (:class:`ClientSettings`), the session
(:class:`Client`), argument types, the readable output (tables, ``key  value`` lines; the API's JSON with
``--json``) and the parser helpers, each verb naming the API operation it calls. The verbs live by noun:
:mod:`hookgate.admin_agents` (agents, squads), :mod:`hookgate.admin_autopilots` (autopilots, triggers),
:mod:`hookgate.admin_runs` (runs, tasks, issues, deliveries), :mod:`hookgate.admin_workspace` (me, members,
keys, audit, channels).

Exit codes: 0 done; 1 the API refused (one line: ``hookgate: error: 404 not_found: no such run``); 2 the
request was never answered: bad input, no key, a malformed id, bad client settings, the gateway unreachable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import httpx
from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from hookgate import cli_file, retry

Verb = Callable[["Client", argparse.Namespace], Awaitable[Any]]


class ClientSettings(BaseSettings):
    """Where the gateway is and which credential to use (``HOOKGATE_URL``, ``HOOKGATE_API_KEY``, …)."""

    model_config = SettingsConfigDict(env_prefix="HOOKGATE_", extra="ignore")
    url: str | None = Field(default=None, description="Base URL of a Hookgate gateway (default from host and port)")
    host: str = Field(default="127.0.0.1", description="The gateway's bind address, when HOOKGATE_URL is unset")
    port: int = Field(default=8080, ge=1, le=65535, description="The gateway's port, when HOOKGATE_URL is unset")
    data_dir: Path = Field(default=Path(".hookgate"), description="Where serve leaves cli.json (its address)")
    api_key: SecretStr | None = Field(default=None, description="An hgk_ admin API key")
    runtime_token: SecretStr | None = Field(default=None, description="A pull agent's hgr_ token (hookgate listen)")

    def gateway(self, flag: str | None = None) -> Gateway:
        """Where to send requests, first found: ``flag`` (``--url``), ``HOOKGATE_URL``, a set HOOKGATE_HOST/PORT.

        Then the ``cli.json`` a running ``serve`` left in the data dir, else 127.0.0.1:8080.
        """
        if flag or self.url:
            return Gateway(str(flag or self.url).rstrip("/"))
        if not {"host", "port"} & self.model_fields_set and (found := cli_file.read_url(self.data_dir)):
            return Gateway(found, self.data_dir / cli_file.CLI_FILE)
        return Gateway(cli_file.local_url(self.host, self.port))


@dataclass(frozen=True)
class Gateway:
    """A gateway's base URL, and the ``cli.json`` it was read from, if it was."""

    url: str
    source: Path | None = None

    def unreachable(self, exc: Exception) -> str:
        """The one-line error when it does not answer, naming the file a stale address came from."""
        where = f" (from {self.source}: is hookgate serve still running?)" if self.source else ""
        return f"cannot reach {self.url}: {exc.__class__.__name__}{where}"


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``hookgate: error: <message>`` (one line) and exit with ``code``."""
    print(f"hookgate: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    raise SystemExit(code)


@contextlib.contextmanager
def exit_on_failure(gateway: Gateway) -> Iterator[None]:
    """Exit 1 when the API refuses (:class:`ApiFailure`), 2 when ``gateway`` never answered."""
    try:
        yield
    except ApiFailure as exc:
        fail(str(exc), 1)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        fail(gateway.unreachable(exc))


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


def json_file(path: str) -> Any:
    """An argparse type: the JSON document in a file (`-`: stdin), refused before any request when it is not."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from None
    return json_value(text)


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
        return decoded(await self.http.request(method, path, json=json_body, params=query, headers=headers))


def decoded(answer: httpx.Response) -> Any:
    """A Hookgate answer's JSON; :class:`ApiFailure` for an error status or an answer that is not JSON."""
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

def page(a: argparse.Namespace, **filters: Any) -> dict[str, Any]:
    """The query of a list verb: its filters, ``--limit`` and ``--cursor``."""
    return filters | {"limit": a.limit, "cursor": a.cursor}


def request(method: str, path: str, *, paged: bool = False) -> Verb:
    """A verb that just sends ``method`` to ``path``, its ``{names}`` from the arguments (paged: the list options)."""

    async def verb(c: Client, a: argparse.Namespace) -> Any:
        return await c.call(method, path.format_map(vars(a)), params=page(a) if paged else None)

    return verb


def idempotency(a: argparse.Namespace) -> dict[str, str] | None:
    """The ``Idempotency-Key`` header of a POST verb, if ``--idempotency-key`` was given."""
    return {"Idempotency-Key": a.idempotency_key} if a.idempotency_key else None




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
    "tasks": ("id", "status", "attempt", "agent_id", "run_id", "next_attempt_at", "created_at"),
    "issues": ("id", "status", "title", "autopilot_id", "run_id", "updated_at"),
    "squads": ("id", "name", "leader_id", "member_ids", "created_at"),
    "audit": ("at", "action", "actor_type", "actor_id", "subject_type", "subject_id"),
    "channels": ("id", "name", "url", "events", "secret_hint", "created_at"),
}


def _get(item: dict[str, Any], dotted: str) -> Any:
    value: Any = item
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def cell(value: Any) -> str:
    """One value in a table or a record: ``-`` for null, JSON for objects and lists."""
    if value is None:
        return "-"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def table(items: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """Aligned columns with a header row."""
    rows = [[c.upper().replace(".", " ") for c in columns]] + [[cell(_get(i, c)) for c in columns] for i in items]
    widths = [max(len(r[n]) for r in rows) for n in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def record(item: dict[str, Any]) -> str:
    """One object as ``key  value`` lines (nested objects as JSON)."""
    width = max((len(k) for k in item), default=0)
    return "\n".join(f"{k.ljust(width)}  {cell(v)}" for k, v in item.items())


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


def render(noun: str, answer: Any, columns: tuple[str, ...] | None = None) -> str:
    """The readable form of an answer: a table for lists (``columns``, else the noun's), key/value lines else."""
    if isinstance(answer, dict) and "items" in answer:
        text = table(answer["items"], columns or COLUMNS[noun])
        return text + (f"\n(more: --cursor {answer['next_cursor']})" if answer.get("next_cursor") else "")
    readable = READABLE.get(noun)
    if readable is not None and isinstance(answer, dict) and "id" in answer:
        answer = readable(answer)
    return record(answer)


# ---------------------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------------------

ENV_HELP = ("env HOOKGATE_URL / HOOKGATE_API_KEY supply --url / --key (no URL: HOOKGATE_HOST/HOOKGATE_PORT if set, "
            "else the address a running serve wrote in HOOKGATE_DATA_DIR/cli.json, else http://127.0.0.1:8080); "
            "exit 1 when the API refuses, 2 when the request is not answered (bad input, unreachable)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="gateway base URL (env HOOKGATE_URL; default: the serve of this directory's "
                                 ".hookgate/cli.json, else http://HOOKGATE_HOST:HOOKGATE_PORT)")
    p.add_argument("--key", help="admin API key hgk_… (env HOOKGATE_API_KEY)")
    p.add_argument("--json", action="store_true", help="print the API's JSON answer instead of a table")


def verb(nouns: Any, name: str, fn: Verb, text: str, operation: str | tuple[str, ...],
         columns: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """Add verb ``name`` running ``fn``, which calls the API operation(s) named by their ``operationId``.

    ``columns``: the table of a list answer, when not the noun's (``COLUMNS``).
    """
    p: argparse.ArgumentParser = nouns.add_parser(name, help=text, description=text, epilog=ENV_HELP)
    _common(p)
    p.set_defaults(admin_verb=fn, operations=(operation,) if isinstance(operation, str) else operation,
                   columns=columns)
    return p


def list_verb(nouns: Any, fn: Verb, text: str, operation: str, name: str = "list",
              columns: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """Add a list verb (``list`` unless ``name``): ``verb`` with ``--limit`` and ``--cursor``."""
    p = verb(nouns, name, fn, text, operation, columns)
    p.add_argument("--limit", type=int, default=50, help="page size (default 50, max 500)")
    p.add_argument("--cursor", help="the next page: the cursor a previous list printed")
    return p


def noun(sub: Any, name: str, text: str) -> Any:
    """Add noun ``name``; its verbs are added to what this returns."""
    return sub.add_parser(name, help=text, description=text).add_subparsers(dest="verb", required=True,
                                                                              metavar="VERB")


def add_commands(sub: Any) -> None:
    """Add the admin nouns and their verbs to the ``hookgate`` command tree."""
    from hookgate import admin_agents, admin_autopilots, admin_runs, admin_workspace

    for module in (admin_agents, admin_autopilots, admin_runs, admin_workspace):
        module.add_commands(sub)


def operations(parser: argparse.ArgumentParser, path: str = "hookgate") -> dict[str, list[str]]:
    """Every API operation the commands of ``parser`` call: ``operationId`` → ``["hookgate NOUN VERB", …]``."""
    found: dict[str, list[str]] = {operation: [path] for operation in parser._defaults.get("operations", ())}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                for operation, commands in operations(child, f"{path} {name}").items():
                    found.setdefault(operation, []).extend(commands)
    return found


async def run(args: argparse.Namespace) -> None:
    """Run one admin verb and print its answer; exit 1 when the API refuses, 2 when it never answered."""
    settings = client_settings()
    gateway = settings.gateway(args.url)
    key = args.key or (settings.api_key.get_secret_value() if settings.api_key else None)
    if not key:
        fail("no API key: pass --key or set HOOKGATE_API_KEY")
    headers = {"Authorization": f"Bearer {key}", "User-Agent": "hookgate-cli"}
    with exit_on_failure(gateway):
        async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=30) as http:
            answer = await args.admin_verb(Client(http), args)
    if answer is not None:
        print(json.dumps(answer, indent=2) if args.json else render(args.command, answer, args.columns))
        if not args.json and (note := shown_once(answer)):
            print(note, file=sys.stderr)  # for the person reading; stdout stays the answer alone, for scripts


#: Fields of an answer holding a credential the API never shows again.
ONE_TIME = ("api_key", "runtime_token", "signing_secret")


def shown_once(answer: Any) -> str:
    """For a readable answer holding a one-time credential: the line saying it is shown only this once (or "")."""
    held = [name for name in ONE_TIME if isinstance(answer, dict) and answer.get(name)]
    if not held:
        return ""
    return (f"hookgate: {' and '.join(held)} shown only this once: keep it now (the API never shows it again, "
            "only its last characters)")
