"""``hookgate autopilots …`` and ``hookgate triggers …``: what runs, and what starts it.

The admin API's autopilots, their rule versions and collaborators, and their triggers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hookgate.admin_client import (
    Client,
    json_file,
    json_value,
    list_verb,
    noun,
    page,
    request,
    resource_id,
    verb,
)
from hookgate.preset_data import PRESET_DATA

#: The provider presets a webhook trigger may use (gateway/providers.py).
PROVIDERS = ("generic", "github", "gitlab", "stripe", "slack", "shopify", "standard", "linear", "twilio",
             *PRESET_DATA, "custom")
"""What a trigger's --provider may be: every preset, and `custom` (with --signature-file)."""
VERSION_COLUMNS = ("version", "change", "digest", "publisher_type", "publisher_id", "created_at")
COLLABORATOR_COLUMNS = ("member_id", "name", "role", "added_by", "added_at")


async def autopilots_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots."""
    assignee = {"type": "squad", "id": a.squad} if a.squad else {"type": "agent", "id": a.agent}
    return await c.call("POST", "/v1/autopilots", json_body={
        "title": a.title, "instructions": a.instructions, "assignee": assignee, "execution_mode": a.mode})


async def autopilots_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/autopilots."""
    return await c.call("GET", "/v1/autopilots", params=page(a, status=a.status))


async def triggers_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots/{id}/triggers (webhook unless --cron is given)."""
    if a.cron:
        body: dict[str, Any] = {"kind": "schedule", "cron": a.cron, "timezone": a.timezone,
                                "overlap_policy": a.overlap}
    else:
        body = {"kind": "webhook", "provider": a.provider, "event_filters": a.event or [], **_webhook_fields(a)}
    return await c.call("POST", f"/v1/autopilots/{a.autopilot}/triggers", json_body=body)


def _webhook_fields(a: argparse.Namespace) -> dict[str, Any]:
    """The scheme-as-data fields given (`--signature-file none` sends null: the preset's own check again).

    `--no-payload-filter` sends null: every body is admitted again.
    """
    fields = {"dedupe_key_source": a.dedupe_source, "event_source": a.event_source}
    given = {k: v for k, v in fields.items() if v is not None}
    if a.signature_file is not None:
        given["signature"] = None if a.signature_file == "none" else a.signature_file
    for name, value in (("handshake", a.handshake_file), ("reply", a.reply_file)):
        if value is not None:
            given[name] = None if value == "none" else value
    if a.verify_token is not None:  # a meta handshake with this token (or the given handshake, with it)
        handshake = given.get("handshake") or {"kind": "meta"}
        given["handshake"] = {**handshake, "verify_token": a.verify_token}
    if a.payload_filter is not None:
        given["payload_filter"] = None if a.payload_filter is NO_FILTER else a.payload_filter
    return given


def _json_or_file(text: str) -> Any:
    """An argparse type: `none`, a JSON object given inline, or one read from a file (`@FILE`, a path, `-`)."""
    if text == "none":
        return "none"
    if text.lstrip().startswith("{"):
        return json_value(text)
    return json_file(text.removeprefix("@"))


NO_FILTER = object()
"""What `--no-payload-filter` stores in the namespace: send null."""


def json_or_file(text: str) -> Any:
    """An argparse type: a JSON document given inline, or read from the file after `@` (`@-`: stdin)."""
    return json_file(text[1:]) if text.startswith("@") else json_value(text)


async def triggers_filter_test(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/triggers/{id}/filter-test: a stored delivery or a payload, against the trigger's filter or --filter."""
    body: dict[str, Any] = {"delivery_id": a.delivery} if a.delivery else {"payload": a.payload}
    if a.filter is not None:
        body["filter"] = a.filter
    return await c.call("POST", f"/v1/triggers/{a.trigger}/filter-test", json_body=body)


def _scheme_file(path: str) -> Any:
    return "none" if path == "none" else json_file(path)


def _key_text(text: str) -> str:
    """A public key as given, or read from the file after `@`."""
    if not text.startswith("@"):
        return text
    try:
        return Path(text[1:]).read_text()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {exc.strerror}") from None


triggers_list = request("GET", "/v1/autopilots/{autopilot}/triggers", paged=True)
triggers_get = request("GET", "/v1/triggers/{trigger}")


async def triggers_pause(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/triggers/{id} ``{"enabled": false}``."""
    return await c.call("PATCH", f"/v1/triggers/{a.trigger}", json_body={"enabled": False})


async def triggers_resume(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/triggers/{id} ``{"enabled": true}``."""
    return await c.call("PATCH", f"/v1/triggers/{a.trigger}", json_body={"enabled": True})


triggers_rotate = request("POST", "/v1/triggers/{trigger}/rotate-token")


async def triggers_set_secret(c: Client, a: argparse.Namespace) -> Any:
    """PUT /v1/triggers/{id}/signing-secret (or DELETE with --remove)."""
    if a.remove:
        return await c.call("DELETE", f"/v1/triggers/{a.trigger}/signing-secret")
    if a.public_key is not None:
        return await c.call("PUT", f"/v1/triggers/{a.trigger}/signing-secret",
                            json_body={"public_key": a.public_key, "grace_seconds": a.grace})
    secret = a.secret if a.secret is not None else sys.stdin.readline().rstrip("\r\n")  # spaces belong to it
    return await c.call("PUT", f"/v1/triggers/{a.trigger}/signing-secret",
                        json_body={"secret": secret, "grace_seconds": a.grace})


autopilots_get = request("GET", "/v1/autopilots/{autopilot}")


async def autopilots_update(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/autopilots/{id} with the fields given."""
    assignee = ({"type": "squad", "id": a.squad} if a.squad else {"type": "agent", "id": a.agent} if a.agent
                else None)
    body = {"title": a.title, "instructions": a.instructions, "assignee": assignee, "execution_mode": a.mode,
            "issue_title_template": a.issue_title_template, "run_timeout_s": a.run_timeout}
    return await c.call("PATCH", f"/v1/autopilots/{a.autopilot}",
                        json_body={k: v for k, v in body.items() if v is not None})


autopilots_pause = request("POST", "/v1/autopilots/{autopilot}/pause")
autopilots_resume = request("POST", "/v1/autopilots/{autopilot}/resume")
autopilots_archive = request("POST", "/v1/autopilots/{autopilot}/archive")
autopilots_versions = request("GET", "/v1/autopilots/{autopilot}/versions", paged=True)
autopilots_collaborators = request("GET", "/v1/autopilots/{autopilot}/collaborators", paged=True)


async def autopilots_add_collaborator(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/autopilots/{id}/collaborators."""
    return await c.call("POST", f"/v1/autopilots/{a.autopilot}/collaborators", json_body={"member_id": a.member})


autopilots_remove_collaborator = request("DELETE", "/v1/autopilots/{autopilot}/collaborators/{member}")


async def triggers_update(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/triggers/{id} with the fields given."""
    body = {"provider": a.provider, "event_filters": a.event, "rate_limit_per_minute": a.rate_limit, "cron": a.cron,
            "timezone": a.timezone, "overlap_policy": a.overlap}
    return await c.call("PATCH", f"/v1/triggers/{a.trigger}",
                        json_body={k: v for k, v in body.items() if v is not None} | _webhook_fields(a))


triggers_delete = request("DELETE", "/v1/triggers/{trigger}")


async def triggers_preview(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/triggers/{id}/preview."""
    return await c.call("GET", f"/v1/triggers/{a.trigger}/preview", params={"count": a.count})


# -- parser ------------------------------------------------------------------------------------------

def _autopilots(sub: Any) -> None:
    autopilots = noun(sub, "autopilots", "create, show, change, pause, resume and archive autopilots; their rule "
                      "versions and collaborators")
    p = verb(autopilots, "create", autopilots_create, "create an autopilot assigned to an agent or a squad",
             "create_autopilot")
    p.add_argument("--title", required=True, help="autopilot title")
    p.add_argument("--instructions", default="", help="what the agent should do")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--agent", type=resource_id("agent"), help="assignee agent id")
    who.add_argument("--squad", type=resource_id("squad"), help="assignee squad id (its leader does the work)")
    p.add_argument("--mode", choices=("run_only", "create_issue"), default="create_issue",
                   help="create an issue per run (default) or run the agent directly")
    list_verb(autopilots, autopilots_list, "list autopilots", "list_autopilots").add_argument(
        "--status", choices=("active", "paused", "archived"))
    autopilot_id = resource_id("autopilot")
    verb(autopilots, "get", autopilots_get, "show an autopilot: title, instructions, assignee, mode, status, version",
         "get_autopilot").add_argument("autopilot", type=autopilot_id)
    p = verb(autopilots, "update", autopilots_update, "change an autopilot (writers); each real change publishes a "
             "new rule version", "edit_autopilot")
    p.add_argument("autopilot", type=autopilot_id)
    p.add_argument("--title", help="new title")
    p.add_argument("--instructions", help="what the agent should do")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--agent", type=resource_id("agent"), help="assign it to this agent")
    who.add_argument("--squad", type=resource_id("squad"), help="assign it to this squad (its leader does the work)")
    p.add_argument("--mode", choices=("run_only", "create_issue"), help="execution mode")
    p.add_argument("--issue-title-template", metavar="TEMPLATE", help="title of the issue each run creates")
    p.add_argument("--run-timeout", type=int, metavar="SECONDS", help="a run still going after this fails "
                   "(deadline_exceeded)")
    for name, fn, operation, text in (
        ("pause", autopilots_pause, "pause_autopilot", "pause an autopilot: new runs are skipped (autopilot_paused)"),
        ("resume", autopilots_resume, "resume_autopilot", "resume a paused autopilot"),
        ("archive", autopilots_archive, "archive_autopilot", "archive an autopilot: it runs no more (for good)"),
    ):
        verb(autopilots, name, fn, text, operation).add_argument("autopilot", type=autopilot_id)
    list_verb(autopilots, autopilots_versions, "list an autopilot's rule versions, oldest first", "list_versions",
              name="versions", columns=VERSION_COLUMNS).add_argument("autopilot", type=autopilot_id)
    list_verb(autopilots, autopilots_collaborators, "list the members with write access to an autopilot",
              "list_collaborators", name="collaborators", columns=COLLABORATOR_COLUMNS).add_argument(
        "autopilot", type=autopilot_id)
    for name, fn, operation, text in (
        ("add-collaborator", autopilots_add_collaborator, "add_collaborator",
         "give a member write access to an autopilot (its creator, owners and admins)"),
        ("remove-collaborator", autopilots_remove_collaborator, "remove_collaborator",
         "take a member's write access away; prints the collaborators left"),
    ):
        p = verb(autopilots, name, fn, text, operation, columns=COLLABORATOR_COLUMNS)
        p.add_argument("autopilot", type=autopilot_id)
        p.add_argument("member", type=resource_id("member"))


def _scheme_options(p: Any) -> None:
    p.add_argument("--signature-file", metavar="FILE", type=_scheme_file,
                   help="a signature scheme as JSON (docs/PROVIDERS.md, custom schemes; - reads stdin; `none` puts "
                   "the preset's own check back) (webhook)")
    p.add_argument("--dedupe-source", metavar="SOURCE", help="where the dedupe key is: header:NAME, json:/pointer, "
                   "form:FIELD or query:NAME (webhook)")
    p.add_argument("--event-source", metavar="SOURCE", help="where the event name is, as --dedupe-source (webhook)")
    p.add_argument("--handshake-file", metavar="JSON|@FILE", type=_json_or_file,
                   help="the handshake to answer, as JSON inline or in a file: {\"kind\": \"echo_query\", \"param\": "
                   "\"validationToken\"} (docs/PROVIDERS.md, handshakes; `none` puts the preset's back) (webhook)")
    p.add_argument("--verify-token", metavar="TOKEN", help="a meta handshake's verify token, as typed into Meta's "
                   "dashboard (stored encrypted, never shown again) (webhook)")
    p.add_argument("--reply-file", metavar="JSON|@FILE", type=_json_or_file,
                   help="the answer to accepted and duplicate deliveries: {\"status\": 200, \"content_type\": "
                   "\"text/xml\", \"body\": \"<Response/>\"} (`none`: the JSON receipt again) (webhook)")


def _filter_options(p: Any, *, clearable: bool) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--payload-filter", metavar="JSON", type=json_or_file,
                       help="admit only the bodies that match this filter, JSON or @FILE (docs/PROVIDERS.md, payload "
                       "filters) (webhook)")
    if clearable:
        group.add_argument("--no-payload-filter", dest="payload_filter", action="store_const", const=NO_FILTER,
                           help="remove the payload filter: every body is admitted again (webhook)")


def _triggers(sub: Any) -> None:
    triggers = noun(sub, "triggers", "create, list, show, change, pause, resume, delete and preview triggers; rotate "
                    "tokens, set secrets, test payload filters")
    trigger_id = resource_id("trigger")
    p = verb(triggers, "create", triggers_create, "create a webhook trigger, or a schedule with --cron",
             "create_trigger")
    p.add_argument("--autopilot", required=True, type=resource_id("autopilot"), help="autopilot id")
    p.add_argument("--provider", default="generic", choices=PROVIDERS, help="webhook preset (webhook)")
    p.add_argument("--event", action="append", help="event filter, repeatable, * wildcards (webhook)")
    p.add_argument("--cron", help="5-field cron expression: makes a schedule trigger")
    p.add_argument("--timezone", default="UTC", help="IANA zone the cron is read in (schedule)")
    p.add_argument("--overlap", choices=("skip", "buffer_one", "allow"), default="skip",
                   help="what an occurrence does while the previous run is active (schedule)")
    _scheme_options(p)
    _filter_options(p, clearable=False)
    list_verb(triggers, triggers_list, "list an autopilot's live triggers, oldest first",
              "list_triggers").add_argument(
        "--autopilot", required=True, type=resource_id("autopilot"), help="autopilot id")
    verb(triggers, "get", triggers_get, "show a trigger (its token and URL only if you may edit it)",
         "get_trigger").add_argument("trigger", type=trigger_id)
    verb(triggers, "pause", triggers_pause, "disable a trigger: its webhooks are ignored (trigger_disabled), "
          "its schedule stops firing", "edit_trigger").add_argument("trigger", type=trigger_id)
    verb(triggers, "resume", triggers_resume, "enable a trigger again (a schedule plans its next fire from now)",
         "edit_trigger").add_argument("trigger", type=trigger_id)
    verb(triggers, "rotate-token", triggers_rotate, "give a webhook trigger a new token; the old URL answers 404",
         "rotate_token").add_argument("trigger", type=trigger_id)
    p = verb(triggers, "set-secret", triggers_set_secret, "set (or --remove) a webhook trigger's signing secret",
             ("set_signing_secret", "remove_signing_secret"))
    p.add_argument("trigger", type=trigger_id)
    p.add_argument("--secret", help="the provider's signing secret (read from stdin when omitted)")
    p.add_argument("--public-key", type=_key_text, help="for a public-key scheme: the sender's public key (hex, "
                   "base64 DER or PEM; @FILE reads it from a file)")
    p.add_argument("--grace", type=int, default=0, help="seconds the previous secret still verifies")
    p.add_argument("--remove", action="store_true", help="remove the secret (bearer-only mode)")
    p = verb(triggers, "update", triggers_update, "change a trigger: a webhook's provider, event and payload "
             "filters, rate limit, a schedule's cron, time zone and overlap policy", "edit_trigger")
    p.add_argument("trigger", type=trigger_id)
    p.add_argument("--provider", choices=PROVIDERS, help="webhook preset (webhook)")
    events = p.add_mutually_exclusive_group()
    events.add_argument("--event", action="append", help="event filter, repeatable; replaces the list (webhook)")
    events.add_argument("--all-events", dest="event", action="store_const", const=[],
                        help="no filter: every event starts a run (webhook)")
    p.add_argument("--rate-limit", type=int, metavar="PER_MINUTE", help="accepted requests a minute (webhook)")
    p.add_argument("--cron", help="5-field cron expression (schedule)")
    p.add_argument("--timezone", help="IANA zone the cron is read in (schedule)")
    p.add_argument("--overlap", choices=("skip", "buffer_one", "allow"),
                   help="what an occurrence does while the previous run is active (schedule)")
    _scheme_options(p)
    _filter_options(p, clearable=True)
    p = verb(triggers, "filter-test", triggers_filter_test, "does a stored delivery or a payload match a webhook "
             "trigger's payload filter, and which node decided", "filter_test")
    p.add_argument("trigger", type=trigger_id)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--delivery", type=resource_id("delivery"), help="a stored delivery's id: its body")
    what.add_argument("--payload", type=json_or_file, metavar="JSON", help="a body as JSON, or @FILE")
    p.add_argument("--filter", type=json_or_file, metavar="JSON", help="try this filter (JSON or @FILE) instead of "
                   "the trigger's own")
    verb(triggers, "delete", triggers_delete, "delete a trigger: its token stops working at once; past deliveries "
         "and runs stay readable", "delete_trigger").add_argument("trigger", type=trigger_id)
    p = verb(triggers, "preview", triggers_preview, "the next fire times of a schedule trigger, in UTC and in its "
             "zone", "preview_trigger")
    p.add_argument("trigger", type=trigger_id)
    p.add_argument("--count", type=int, default=5, help="how many (default 5, max 100)")


def add_commands(sub: Any) -> None:
    """Add ``autopilots`` and ``triggers``."""
    _autopilots(sub)
    _triggers(sub)
