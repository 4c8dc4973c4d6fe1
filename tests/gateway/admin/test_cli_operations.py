"""A CLI verb for every API operation: ``/openapi.json`` walked against the verbs, and each verb run for real.

Every operation of the served document must be named by a command (``hookgate.admin_client.operations``), and
every command named must really call it: each admin verb runs against the live app and the access log must
show its request, method and path, answered by that operation's route (a 404 for an id that does not exist
still reached it). ``deliveries tail``, ``listen`` and ``send`` run for minutes or need a runtime token; each
has its own acceptance test against a real gateway (test_cli_admin, test_listen, test_send).
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from typing import Any

import httpx

from hookgate.admin_client import operations
from hookgate.cli import build_parser
from tests.gateway.admin.conftest import hookgate

ZERO = "00000000-0000-0000-0000-000000000000"
#: Proven by their own acceptance tests (see the module docstring).
ELSEWHERE = {"hookgate deliveries tail", "hookgate listen", "hookgate send"}

#: Every admin verb in an order that makes what the next ones need; ``{name}`` is an id saved from an answer.
STEPS: list[tuple[str, str | None, str | None]] = [
    # (argv, save as, the answer's field holding the id)
    ("me", None, None),
    ("members create --name ann", "member", "id"),
    ("members list", None, None),
    ("members get {member}", None, None),
    ("members update {member} --role admin", None, None),
    ("keys create --member {member}", "key", "id"),
    ("keys create", None, None),
    ("keys list", None, None),
    ("keys get {key}", None, None),
    ("keys revoke {key}", None, None),
    ("agents create --name bot --endpoint http://127.0.0.1:9/agent", "agent", "id"),
    ("agents list", None, None),
    ("agents get {agent}", None, None),
    ("agents update {agent} --name bot2", None, None),
    ("agents rotate-secret {agent}", None, None),
    ("squads create --name crew --leader {agent}", "squad", "id"),
    ("squads list", None, None),
    ("squads get {squad}", None, None),
    ("autopilots create --title triage --agent {agent} --mode run_only", "autopilot", "id"),
    ("autopilots list", None, None),
    ("autopilots get {autopilot}", None, None),
    ("autopilots update {autopilot} --title triage2", None, None),
    ("autopilots versions {autopilot}", None, None),
    ("autopilots add-collaborator {autopilot} {member}", None, None),
    ("autopilots collaborators {autopilot}", None, None),
    ("autopilots remove-collaborator {autopilot} {member}", None, None),
    ("autopilots pause {autopilot}", None, None),
    ("autopilots resume {autopilot}", None, None),
    ("triggers create --autopilot {autopilot}", "trigger", "id"),
    ("triggers create --autopilot {autopilot} --cron '0 9 * * *'", "schedule", "id"),
    ("triggers list --autopilot {autopilot}", None, None),
    ("triggers get {trigger}", None, None),
    ("triggers update {trigger} --rate-limit 10", None, None),
    ("triggers pause {trigger}", None, None),
    ("triggers resume {trigger}", None, None),
    ("triggers rotate-token {trigger}", None, None),
    ("triggers set-secret {trigger} --secret s3cret-1234", None, None),
    ("triggers set-secret {trigger} --remove", None, None),
    ("triggers preview {schedule}", None, None),
    ("runs start {autopilot}", "run", "run_id"),
    ("runs list", None, None),
    ("runs get {run}", None, None),
    ("runs cancel {run}", None, None),
    ("runs retry {run}", "task", "task_id"),
    ("tasks list", None, None),
    ("tasks get {task}", None, None),
    ("tasks attempts {task}", None, None),
    ("issues list", None, None),
    (f"issues get {ZERO}", None, None),
    (f"issues update {ZERO} --status done", None, None),
    ("deliveries list", None, None),
    ("deliveries get {delivery}", None, None),
    ("deliveries replay {delivery}", None, None),
    ("triggers filter-test {trigger} --delivery {delivery}", None, None),
    ("deliveries replay-bulk --trigger {trigger} --dry-run", None, None),
    ("audit list", None, None),
    ("channels create --name ops --endpoint http://127.0.0.1:9/alerts --event run.failed", "channel", "id"),
    ("channels list", None, None),
    ("channels get {channel}", None, None),
    ("channels test {channel}", None, None),
    ("channels delete {channel}", None, None),
    ("triggers delete {schedule}", None, None),
    ("agents archive {agent}", None, None),
    ("autopilots archive {autopilot}", None, None),
]


def _command(argv: list[str]) -> str:
    """``hookgate NOUN VERB`` of an argv (``me`` has no verb)."""
    words = [w for w in argv if not w.startswith("-")]
    return "hookgate " + " ".join(words[:1] if words[0] == "me" else words[:2])


def _route(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")


async def test_every_openapi_operation_has_a_verb(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    documented = {op["operationId"] for ops in doc["paths"].values() for op in ops.values()}
    mapped = operations(build_parser())
    assert sorted(documented - set(mapped)) == [], "operations without a CLI verb"
    assert sorted(set(mapped) - documented) == [], "verbs naming an operation the API does not have"


async def test_each_verb_calls_the_operation_it_names(world, live_url, client, capsys, monkeypatch, caplog):
    doc = (await client.get("/openapi.json")).json()
    route = {op["operationId"]: (method.upper(), _route(path)) for path, ops in doc["paths"].items()
             for method, op in ops.items()}
    by_command: dict[str, set[str]] = {}
    for operation, commands in operations(build_parser()).items():
        for command in commands:
            by_command.setdefault(command, set()).add(operation)
    ran = {_command(shlex.split(argv)) for argv, _, _ in STEPS}
    assert sorted(set(by_command) - ran - ELSEWHERE) == [], "verbs this test does not run"

    monkeypatch.setenv("HOOKGATE_URL", live_url)
    monkeypatch.setenv("HOOKGATE_API_KEY", world.api_key)
    ids: dict[str, Any] = {}
    reached: dict[str, set[str]] = {}
    caplog.set_level(logging.INFO, logger="hookgate.access")
    for argv, save, field in STEPS:
        if "{delivery}" in argv and "delivery" not in ids:
            token = json.loads((await hookgate(capsys, "triggers", "get", ids["trigger"], "--json"))[1])["token"]
            async with httpx.AsyncClient(base_url=live_url) as http:
                ids["delivery"] = (await http.post(f"/hooks/{token}", json={"n": 1})).json()["delivery_id"]
        words = [w.format(**ids) for w in shlex.split(argv)]
        caplog.clear()
        code, out, err = await hookgate(capsys, *words, "--json")
        assert code in (0, 1), (argv, err)
        if save:
            assert code == 0, (argv, err)
            ids[save] = json.loads(out)[field]
        requests = {(r.method, r.path) for r in caplog.records if r.name == "hookgate.access"}  # type: ignore[attr-defined]
        command = _command(words)
        reached.setdefault(command, set()).update(
            operation for operation in by_command[command] if any(
                method == route[operation][0] and route[operation][1].match(path) for method, path in requests))
    missed = {command: sorted(by_command[command] - reached.get(command, set())) for command in ran}
    assert {c: ops for c, ops in missed.items() if ops} == {}, "verbs that did not call the operation they name"
