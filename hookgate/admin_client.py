"""Admin verbs of the ``hookgate`` command: thin HTTP clients of the admin API (ARCHITECTURE §2, §11).

``hookgate agents create|list|get|update|rotate-secret``, ``autopilots create``,
``triggers create|rotate-token|set-secret``, ``runs list|get|start``, ``deliveries list|replay``. Readable
tables by default, the API's JSON with ``--json``. Every verb takes ``--url`` and ``--key`` (env
``HOOKGATE_URL``, ``HOOKGATE_API_KEY``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

Verb = Callable[["Client", argparse.Namespace], Awaitable[Any]]


class ClientSettings(BaseSettings):
    """Where the admin API is and which key to use (``HOOKGATE_URL``, ``HOOKGATE_API_KEY``)."""

    model_config = SettingsConfigDict(env_prefix="HOOKGATE_", extra="ignore")
    url: str = Field(default="http://127.0.0.1:8080", description="Base URL of a Hookgate gateway")
    api_key: SecretStr | None = Field(default=None, description="An hgk_ admin API key")


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
            body = {"error": "bad_response", "message": answer.text[:200]}
        if answer.status_code >= 400:
            raise ApiFailure(answer.status_code, body.get("error", "error"), body.get("message", ""))
        return body


# ---------------------------------------------------------------------------------------------------
# Verbs
# ---------------------------------------------------------------------------------------------------

async def agents_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/agents."""
    runtime = {"kind": "pull"} if a.pull else {"kind": "http", "url": a.endpoint, "timeout_s": a.timeout}
    return await c.call("POST", "/v1/agents", json_body={
        "name": a.name, "runtime": runtime, "visibility": "private" if a.private else "workspace",
        "max_concurrency": a.max_concurrency})


async def agents_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/agents."""
    return await c.call("GET", "/v1/agents", params={"limit": a.limit})


async def agents_get(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/agents/{id}."""
    return await c.call("GET", f"/v1/agents/{a.agent}")


async def agents_update(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/agents/{id} with the fields given."""
    body = {"name": a.name, "url": a.endpoint, "timeout_s": a.timeout, "max_concurrency": a.max_concurrency,
            "visibility": a.visibility}
    return await c.call("PATCH", f"/v1/agents/{a.agent}", json_body={k: v for k, v in body.items() if v is not None})


async def agents_rotate_secret(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/agents/{id}/rotate-secret."""
    return await c.call("POST", f"/v1/agents/{a.agent}/rotate-secret")


async def autopilots_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots."""
    assignee = {"type": "squad", "id": a.squad} if a.squad else {"type": "agent", "id": a.agent}
    return await c.call("POST", "/v1/autopilots", json_body={
        "title": a.title, "instructions": a.instructions, "assignee": assignee, "execution_mode": a.mode})


async def autopilots_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/autopilots."""
    return await c.call("GET", "/v1/autopilots", params={"limit": a.limit, "status": a.status})


async def triggers_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots/{id}/triggers (webhook unless --cron is given)."""
    if a.cron:
        body: dict[str, Any] = {"kind": "schedule", "cron": a.cron, "timezone": a.timezone,
                                "overlap_policy": a.overlap}
    else:
        body = {"kind": "webhook", "provider": a.provider, "event_filters": a.event or []}
    return await c.call("POST", f"/v1/autopilots/{a.autopilot}/triggers", json_body=body)


async def triggers_rotate(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/triggers/{id}/rotate-token."""
    return await c.call("POST", f"/v1/triggers/{a.trigger}/rotate-token")


async def triggers_set_secret(c: Client, a: argparse.Namespace) -> Any:
    """PUT /v1/triggers/{id}/signing-secret (or DELETE with --remove)."""
    if a.remove:
        return await c.call("DELETE", f"/v1/triggers/{a.trigger}/signing-secret")
    secret = a.secret if a.secret is not None else sys.stdin.readline().rstrip("\r\n")  # spaces belong to it
    return await c.call("PUT", f"/v1/triggers/{a.trigger}/signing-secret",
                        json_body={"secret": secret, "grace_seconds": a.grace})


async def runs_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/runs."""
    return await c.call("GET", "/v1/runs", params={"autopilot_id": a.autopilot, "status": a.status,
                                                   "source": a.source, "limit": a.limit})


async def runs_get(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/runs/{id}."""
    return await c.call("GET", f"/v1/runs/{a.run}")


async def runs_start(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots/{id}/runs (manual: you are the originator)."""
    body = {"source": a.source} | ({"payload": json.loads(a.payload)} if a.payload else {})
    return await c.call("POST", f"/v1/autopilots/{a.autopilot}/runs", json_body=body,
                        headers={"Idempotency-Key": a.idempotency_key} if a.idempotency_key else None)


async def deliveries_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/deliveries."""
    return await c.call("GET", "/v1/deliveries", params={"trigger_id": a.trigger, "status": a.status,
                                                         "limit": a.limit})


async def deliveries_replay(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/deliveries/{id}/replay."""
    return await c.call("POST", f"/v1/deliveries/{a.delivery}/replay",
                        headers={"Idempotency-Key": a.idempotency_key} if a.idempotency_key else None)


# ---------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------

COLUMNS = {
    "agents": ("id", "name", "runtime.kind", "runtime.url", "visibility", "archived_at"),
    "autopilots": ("id", "title", "status", "execution_mode", "assignee.type", "version"),
    "runs": ("id", "source", "status", "autopilot_id", "reason_code", "created_at"),
    "deliveries": ("id", "status", "signature_status", "event", "run_id", "received_at"),
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


def render(noun: str, answer: Any) -> str:
    """The readable form of an answer: a table for lists, key/value lines for one object."""
    if isinstance(answer, dict) and "items" in answer:
        text = table(answer["items"], COLUMNS[noun])
        return text + (f"\n(more: --cursor {answer['next_cursor']})" if answer.get("next_cursor") else "")
    return record(answer)


# ---------------------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------------------

ENV_HELP = "env HOOKGATE_URL / HOOKGATE_API_KEY supply --url / --key"
NOUNS = ("agents", "autopilots", "triggers", "runs", "deliveries")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="gateway base URL (env HOOKGATE_URL, default http://127.0.0.1:8080)")
    p.add_argument("--key", help="admin API key hgk_… (env HOOKGATE_API_KEY)")
    p.add_argument("--json", action="store_true", help="print the API's JSON answer instead of a table")


def _verb(nouns: Any, name: str, fn: Verb, text: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = nouns.add_parser(name, help=text, description=text, epilog=ENV_HELP)
    _common(p)
    p.set_defaults(admin_verb=fn)
    return p


def add_commands(sub: Any) -> None:
    """Add the admin nouns and their verbs to the ``hookgate`` command tree."""
    agents = sub.add_parser("agents", help="create, list, show and change agents (admin API client)").add_subparsers(
        dest="verb", required=True, metavar="VERB")
    p = _verb(agents, "create", agents_create, "create an http agent (--endpoint) or a pull agent (--pull)")
    p.add_argument("--name", required=True, help="agent name")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--endpoint", help="URL we push tasks to (http agent)")
    kind.add_argument("--pull", action="store_true", help="a runtime that pulls work with an hgr_ token")
    p.add_argument("--timeout", type=float, default=10.0, help="push timeout in seconds (default 10)")
    p.add_argument("--private", action="store_true", help="only you may assign work to it")
    p.add_argument("--max-concurrency", type=int, default=4, help="tasks at once (default 4)")
    _verb(agents, "list", agents_list, "list agents").add_argument("--limit", type=int, default=50)
    _verb(agents, "get", agents_get, "show an agent").add_argument("agent")
    p = _verb(agents, "update", agents_update, "change an agent's name, endpoint, timeout, concurrency, visibility")
    p.add_argument("agent")
    p.add_argument("--name", help="new name")
    p.add_argument("--endpoint", help="new URL we push tasks to (http agent; checked like at creation)")
    p.add_argument("--timeout", type=float, help="push timeout in seconds (http agent)")
    p.add_argument("--max-concurrency", type=int, help="tasks at once (running ones are never cut)")
    seen = p.add_mutually_exclusive_group()
    seen.add_argument("--private", dest="visibility", action="store_const", const="private",
                      help="only you may assign work to it")
    seen.add_argument("--workspace", dest="visibility", action="store_const", const="workspace",
                      help="every member may assign work to it")
    _verb(agents, "rotate-secret", agents_rotate_secret,
          "give an http agent a new signing secret (shown once); the old one also signs pushes for 24 hours"
          ).add_argument("agent")

    autopilots = sub.add_parser("autopilots", help="create and list autopilots (admin API client)").add_subparsers(
        dest="verb", required=True, metavar="VERB")
    p = _verb(autopilots, "create", autopilots_create, "create an autopilot assigned to an agent or a squad")
    p.add_argument("--title", required=True, help="autopilot title")
    p.add_argument("--instructions", default="", help="what the agent should do")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--agent", help="assignee agent id")
    who.add_argument("--squad", help="assignee squad id (its leader does the work)")
    p.add_argument("--mode", choices=("run_only", "create_issue"), default="create_issue",
                   help="create an issue per run (default) or run the agent directly")
    p = _verb(autopilots, "list", autopilots_list, "list autopilots")
    p.add_argument("--status", choices=("active", "paused", "archived"))
    p.add_argument("--limit", type=int, default=50)

    triggers = sub.add_parser("triggers", help="create triggers, rotate tokens, set secrets").add_subparsers(
        dest="verb", required=True, metavar="VERB")
    p = _verb(triggers, "create", triggers_create, "create a webhook trigger, or a schedule with --cron")
    p.add_argument("--autopilot", required=True, help="autopilot id")
    p.add_argument("--provider", default="generic", help="webhook preset: generic, github, stripe, … (webhook)")
    p.add_argument("--event", action="append", help="event filter, repeatable, * wildcards (webhook)")
    p.add_argument("--cron", help="5-field cron expression: makes a schedule trigger")
    p.add_argument("--timezone", default="UTC", help="IANA zone the cron is read in (schedule)")
    p.add_argument("--overlap", choices=("skip", "buffer_one", "allow"), default="skip",
                   help="what an occurrence does while the previous run is active (schedule)")
    _verb(triggers, "rotate-token", triggers_rotate, "give a webhook trigger a new token; the old URL answers 404"
          ).add_argument("trigger")
    p = _verb(triggers, "set-secret", triggers_set_secret, "set (or --remove) a webhook trigger's signing secret")
    p.add_argument("trigger")
    p.add_argument("--secret", help="the provider's signing secret (read from stdin when omitted)")
    p.add_argument("--grace", type=int, default=0, help="seconds the previous secret still verifies")
    p.add_argument("--remove", action="store_true", help="remove the secret (bearer-only mode)")

    runs = sub.add_parser("runs", help="list, show and start runs").add_subparsers(
        dest="verb", required=True, metavar="VERB")
    p = _verb(runs, "list", runs_list, "list runs, newest first")
    p.add_argument("--autopilot")
    p.add_argument("--status")
    p.add_argument("--source", choices=("manual", "schedule", "webhook", "api"))
    p.add_argument("--limit", type=int, default=50)
    _verb(runs, "get", runs_get, "show a run and its chain (delivery → run → issue → task)").add_argument("run")
    p = _verb(runs, "start", runs_start, "start a run of an autopilot by hand")
    p.add_argument("autopilot")
    p.add_argument("--payload", help="JSON object passed to the agent")
    p.add_argument("--source", choices=("manual", "api"), default="manual")
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes starts one run")

    deliveries = sub.add_parser("deliveries", help="list and replay webhook deliveries").add_subparsers(
        dest="verb", required=True, metavar="VERB")
    p = _verb(deliveries, "list", deliveries_list, "list deliveries, newest first")
    p.add_argument("--trigger")
    p.add_argument("--status", choices=("queued", "dispatched", "rejected", "ignored", "failed"))
    p.add_argument("--limit", type=int, default=50)
    p = _verb(deliveries, "replay", deliveries_replay, "replay a delivery as a new one (runs it again)")
    p.add_argument("delivery")
    p.add_argument("--idempotency-key", help="retry-safe: the same key within 5 minutes replays once")


async def run(args: argparse.Namespace) -> None:
    """Run one admin verb and print its answer; exits 1 on an API error, 2 when unreachable."""
    settings = ClientSettings()
    url = args.url or settings.url
    key = args.key or (settings.api_key.get_secret_value() if settings.api_key else None)
    if not key:
        raise SystemExit("hookgate: error: no API key: pass --key or set HOOKGATE_API_KEY")
    headers = {"Authorization": f"Bearer {key}", "User-Agent": "hookgate-cli"}
    try:
        async with httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=30) as http:
            answer = await args.admin_verb(Client(http), args)
    except ApiFailure as exc:
        print(f"hookgate: error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except httpx.HTTPError as exc:
        print(f"hookgate: error: cannot reach {url}: {exc.__class__.__name__}", file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps(answer, indent=2) if args.json else render(args.command, answer))
