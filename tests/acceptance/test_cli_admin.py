"""The admin verbs as a user runs them: the real ``hookgate`` against a real gateway process.

Parity with the API (deliveries get/tail, runs cancel/retry, tasks attempts, agents' retry schedule,
notification channels, triggers list/get/pause/resume, members, keys, ``--cursor``), a quiet stderr,
one-line errors with exit code 2 for bad input, ``HOOKGATE_URL`` built from ``HOOKGATE_HOST``/``HOOKGATE_PORT``,
and shell completion.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.acceptance.cli import ARGV, cli_env, hookgate
from tests.conftest import TEST_SECRET_KEY
from tests.processes import ROOT, Proc, Spawner

ZERO = "00000000-0000-0000-0000-000000000000"


def ok_json(*args: str, env: dict[str, str]) -> Any:
    """``hookgate ARGS --json``, which must succeed with nothing on stderr."""
    done = hookgate(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr  # no log lines at the default level
    return json.loads(done.stdout)


@dataclass
class Admin:
    gateway: Proc
    env: dict[str, str]
    owner_id: str
    autopilot: dict[str, Any]
    trigger: dict[str, Any]


@pytest.fixture
def admin(db_url: str, spawn: Spawner) -> Admin:
    boot = json.loads(hookgate("bootstrap", "--json", env={"HOOKGATE_DATABASE_URL": db_url,
                                                            "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY}).stdout)
    gateway = spawn.start("gateway", gateway=True)
    gateway.wait_ready(60)
    env = {"HOOKGATE_URL": gateway.url, "HOOKGATE_API_KEY": boot["api_key"]}
    agent = ok_json("agents", "create", "--name", "bot", "--endpoint", "http://127.0.0.1:9/agent", env=env)
    autopilot = ok_json("autopilots", "create", "--title", "t", "--agent", agent["id"], "--mode", "run_only",
                        env=env)
    trigger = ok_json("triggers", "create", "--autopilot", autopilot["id"], env=env)
    return Admin(gateway, env, boot["member_id"], autopilot, trigger)


def test_every_api_verb_has_a_cli_verb_with_quiet_stderr(admin: Admin):
    env, trigger_id = admin.env, admin.trigger["id"]
    listed = ok_json("triggers", "list", "--autopilot", admin.autopilot["id"], env=env)
    assert [t["id"] for t in listed["items"]] == [trigger_id]
    assert ok_json("triggers", "pause", trigger_id, env=env)["enabled"] is False
    ignored = httpx.post(f"{admin.gateway.url}/hooks/{admin.trigger['token']}", json={"a": 1}, timeout=10)
    assert ignored.json()["status"] == "ignored"
    assert ok_json("triggers", "resume", trigger_id, env=env)["enabled"] is True
    assert ok_json("triggers", "get", trigger_id, env=env)["enabled"] is True

    accepted = httpx.post(f"{admin.gateway.url}/hooks/{admin.trigger['token']}", json={"a": 2}, timeout=10).json()
    delivery = ok_json("deliveries", "get", accepted["delivery_id"], env=env)
    assert json.loads(delivery["body"]) == {"a": 2}
    first = ok_json("deliveries", "list", "--limit", "1", env=env)
    assert first["items"][0]["id"] == accepted["delivery_id"] and first["next_cursor"]
    second = ok_json("deliveries", "list", "--limit", "1", "--cursor", first["next_cursor"], env=env)
    assert second["items"][0]["id"] == ignored.json()["delivery_id"]

    cancelled = ok_json("runs", "cancel", accepted["run_id"], "--reason", "not today", env=env)
    assert cancelled["status"] == "cancelled"
    refused = hookgate("runs", "cancel", accepted["run_id"], env=env)
    assert refused.returncode == 1 and refused.stderr.startswith("hookgate: error: 409 run_finished")
    retried = ok_json("runs", "retry", accepted["run_id"], "--idempotency-key", "again-1", env=env)
    assert retried["run_id"] == accepted["run_id"] and retried["attempt"] == 1
    run = ok_json("runs", "get", accepted["run_id"], env=env)
    assert (run["status"], run["task_id"], run["attempt"]) == ("queued", retried["task_id"], 0)
    assert ok_json("tasks", "attempts", retried["task_id"], env=env) == {"items": [], "next_cursor": None}

    agent_id = ok_json("agents", "list", env=env)["items"][0]["id"]
    assert ok_json("agents", "update", agent_id, "--retry-schedule", "5s,1m", env=env)["retry_schedule"] == [5, 60]
    agent = ok_json("agents", "get", agent_id, env=env)
    assert agent["health"]["state"] == "healthy" and agent["retry_schedule"] == [5, 60]
    assert ok_json("agents", "update", agent_id, "--retry-schedule", "default", env=env)["retry_schedule"] is None

    channel = ok_json("channels", "create", "--name", "ops", "--endpoint", "http://127.0.0.1:9/alerts",
                      "--event", "run.failed", env=env)
    assert channel["signing_secret"].startswith("whsec_")
    assert [c["id"] for c in ok_json("channels", "list", env=env)["items"]] == [channel["id"]]
    assert ok_json("channels", "get", channel["id"], env=env)["events"] == ["run.failed"]
    assert ok_json("channels", "test", channel["id"], env=env)["notification_id"]
    assert ok_json("channels", "delete", channel["id"], env=env)["id"] == channel["id"]

    members = ok_json("members", "list", env=env)
    assert [m["id"] for m in members["items"]] == [admin.owner_id]
    assert ok_json("members", "get", admin.owner_id, env=env)["role"] == "owner"
    last = hookgate("members", "update", admin.owner_id, "--role", "admin", env=env)
    assert last.returncode == 1 and "409 last_owner" in last.stderr
    spare = httpx.post(f"{admin.gateway.url}/v1/members/{admin.owner_id}/keys", timeout=10,
                       headers={"Authorization": f"Bearer {env['HOOKGATE_API_KEY']}"}).json()
    keys = ok_json("keys", "list", env=env)
    assert spare["id"] in [k["id"] for k in keys["items"]]
    assert ok_json("keys", "revoke", spare["id"], env=env)["revoked_at"] is not None

    table = hookgate("triggers", "list", "--autopilot", admin.autopilot["id"], env=env)
    assert table.returncode == 0 and table.stderr == ""
    assert table.stdout.split()[:3] == ["ID", "KIND", "ENABLED"] and trigger_id in table.stdout
    header, row = table.stdout.splitlines()[0].split(), next(r for r in table.stdout.splitlines() if trigger_id in r)
    assert row.split()[header.index("RATE_LIMIT_PER_MINUTE")] == str(listed["items"][0]["rate_limit_per_minute"])


def test_tail_prints_each_new_delivery_once_and_ctrl_c_ends_it_cleanly(admin: Admin):
    before = httpx.post(f"{admin.gateway.url}/hooks/{admin.trigger['token']}", json={"n": 0}, timeout=10).json()
    # --last 1: the tail prints the newest delivery at start, which tells the test its start read is done (a
    # loaded machine can take seconds to start a Python process; deliveries sent before that are history).
    tail = subprocess.Popen([*ARGV, "deliveries", "tail", "--json", "--interval", "0.2", "--last", "1"],
                            env=cli_env(admin.env), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: [lines.append(line) for line in tail.stdout or ()], daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not lines and time.monotonic() < deadline:  # the tail has read where it starts
            time.sleep(0.05)
        sent = [httpx.post(f"{admin.gateway.url}/hooks/{admin.trigger['token']}", json={"n": n}, timeout=10).json()
                for n in (1, 2, 3)]
        deadline = time.monotonic() + 20
        while len(lines) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.6)  # a few more polls print nothing twice
        tail.send_signal(signal.SIGINT)
        assert tail.wait(15) == 0
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait(10)
        reader.join(10)
        err = tail.stderr.read() if tail.stderr else ""
        for stream in (tail.stdout, tail.stderr):
            if stream is not None:
                stream.close()
    assert [json.loads(line)["id"] for line in lines] == [before["delivery_id"]] + [
        s["delivery_id"] for s in sent]  # the newest at start, then each new one once, oldest first
    assert err == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("runs", "get", "not-a-uuid"), "not a run id"),
        (("runs", "start", ZERO, "--payload", "{bad json"), "--payload: not valid JSON"),
        (("deliveries", "get"), "required: delivery"),
        (("triggers", "frobnicate", ZERO), "invalid choice: 'frobnicate'"),
        (("keys", "revoke", "123"), "not a key id"),
        (("runs", "retry", "nope"), "not a run id"),
        (("tasks", "attempts", "nope"), "not a task id"),
        (("agents", "update", ZERO, "--retry-schedule", "soon"), "is not a duration"),
        (("channels", "create", "--name", "x", "--endpoint", "http://a", "--event", "run.done"), "invalid choice"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(args, needle):
    done = hookgate(*args, env={"HOOKGATE_API_KEY": "hgk_whatever"})
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("hookgate: error: ") and needle in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({}, "no API key: pass --key or set HOOKGATE_API_KEY"),
        ({"HOOKGATE_API_KEY": "hgk_x", "HOOKGATE_URL": "http://127.0.0.1:1"}, "cannot reach http://127.0.0.1:1"),
        ({"HOOKGATE_API_KEY": "hgk_x", "HOOKGATE_PORT": "eighty"}, "HOOKGATE_PORT"),
        ({"HOOKGATE_API_KEY": "hgk_x", "HOOKGATE_URL": "nope://x"}, "cannot reach nope://x"),
    ],
)
def test_missing_key_bad_settings_and_unreachable_gateway_are_one_line_and_exit_2(env, needle):
    done = hookgate("runs", "list", env=env)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()] and needle in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_gateway_address_defaults_to_hookgate_host_and_port(admin: Admin):
    env = {"HOOKGATE_API_KEY": admin.env["HOOKGATE_API_KEY"], "HOOKGATE_HOST": "0.0.0.0",
           "HOOKGATE_PORT": str(admin.gateway.port)}
    assert ok_json("triggers", "get", admin.trigger["id"], env=env)["id"] == admin.trigger["id"]


def _bash_complete(script: str, words: str) -> list[str]:
    """What bash offers after ``words`` (the last one being completed), with the script sourced."""
    probe = (f'source /dev/stdin <<"EOF"\n{script}EOF\ncomplete -p hookgate\n'
             f"COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); _hookgate\n"
             'printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    first, *offered = done.stdout.splitlines()
    assert first == "complete -F _hookgate hookgate"
    return offered


def test_bash_completion_offers_commands_verbs_options_and_choices():
    script = hookgate("completion", "bash", env={}).stdout
    assert _bash_complete(script, "hookgate ru") == ["runs"]
    assert set(_bash_complete(script, 'hookgate deliveries ""')) >= {"list", "get", "tail", "replay"}
    assert _bash_complete(script, "hookgate triggers pa") == ["pause"]
    assert _bash_complete(script, "hookgate triggers fi") == ["filter-test"]
    assert _bash_complete(script, "hookgate triggers update --no-p") == ["--no-payload-filter"]
    assert _bash_complete(script, "hookgate deliveries tail --in") == ["--interval"]
    assert _bash_complete(script, 'hookgate deliveries list --status ""') == [
        "queued", "dispatched", "rejected", "ignored", "failed"]
    assert _bash_complete(script, "hookgate listen --for") == ["--forward-to"]
    assert _bash_complete(script, "hookgate autopilots ar") == ["archive"]
    assert set(_bash_complete(script, 'hookgate tasks ""')) >= {"list", "get", "attempts"}
    assert _bash_complete(script, "hookgate sen") == ["send"]
    assert _bash_complete(script, 'hookgate send --provider ""') == [
        "generic", "github", "gitlab", "stripe", "slack", "shopify", "standard", "linear", "twilio", "meta", "zoom",
        "dropbox", "paddle", "intercom", "discord", "sendgrid"]
    assert _bash_complete(script, 'hookgate issues update --status ""') == ["todo", "in_progress", "done", "cancelled"]
    assert sorted(_bash_complete(script, "hookgate au")) == ["audit", "autopilots"]


#: Drives an interactive ``zsh -f`` in a pseudo-terminal (zsh/zpty) with the script installed in $fpath the
#: usual way, types each case and prints what the terminal showed. A case ending in TAB completes in place
#: (then Enter runs a stub ``hookgate`` that prints its arguments); one ending in ^D lists the choices.
_ZPTY = r"""
zmodload zsh/zpty
zpty hz 'zsh -f -i'
# Read what the terminal shows until it has been quiet for $1 seconds (10 s at most).
drain() {
    local chunk quiet=0 waited=0; REPLY=""
    while (( quiet < $1 && waited < 10 )); do
        sleep 0.1; (( waited += 0.1 ))
        if zpty -r -t hz chunk; then REPLY+=$chunk; quiet=0; while zpty -r -t hz chunk; do REPLY+=$chunk; done
        else (( quiet += 0.1 )); fi
    done
}
zpty -w hz "PS1='READY> '; fpath=($1 \$fpath); autoload -U compinit; compinit -u -D"
zpty -w hz 'hookgate() { print -r -- "ARGS:$*" }'

drain 1.5
for typed in "${@:2}"; do
    zpty -w -n hz "$typed"
    drain 0.6
    print -r -- "==== ${typed//[[:cntrl:]]/}"
    print -r -- "$REPLY"
    zpty -w -n hz $'\n' && drain 0.3 && print -r -- "$REPLY"
done
zpty -d hz
"""


def _zsh_complete(script: str, tmp: Any, *typed: str) -> dict[str, str]:
    """What a real interactive zsh shows for each ``typed`` (ending in TAB or ^D), ANSI codes removed."""
    folder = tmp / "zfunc"
    folder.mkdir(exist_ok=True)
    (folder / "_hookgate").write_text(script)
    done = subprocess.run(["zsh", "-fc", _ZPTY, "zsh", str(folder), *typed], capture_output=True, text=True,
                          timeout=60, env={"PATH": os.environ["PATH"], "TERM": "xterm", "HOME": str(tmp)})
    assert done.returncode == 0, done.stderr
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", done.stdout)
    shown: dict[str, str] = {}
    for block in plain.split("==== ")[1:]:
        case, _, rest = block.partition("\n")
        shown[case] = rest
    return shown


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here (CI installs it)")
def test_zsh_completion_is_native_and_completes_in_a_real_zsh(tmp_path):
    script = hookgate("completion", "zsh", env={}).stdout
    assert script.startswith("#compdef hookgate\n") and "bashcompinit" not in script and "complete -F" not in script
    # eval'd in ~/.zshrc (compinit run for it when missing): the function is registered for hookgate.
    done = subprocess.run(["zsh", "-fc", 'eval "$(cat)"; print -r -- ${_comps[hookgate]}'], input=script,
                          capture_output=True, text=True, timeout=30, env={"PATH": os.environ["PATH"],
                                                                             "HOME": str(tmp_path)})
    assert done.returncode == 0 and done.stdout.strip() == "_hookgate", done.stderr

    shown = _zsh_complete(script, tmp_path, "hookgate ru\t", "hookgate deliveries \x04",
                          "hookgate deliveries list --status rej\t", "hookgate deliveries tail --in\t",
                          "hookgate deliveries list --limit \t", "hookgate deliveries list --\x04")
    assert "ARGS:runs" in shown["hookgate ru"]
    listed = re.findall(r"^(\S+) +-- (.*)$", shown["hookgate deliveries "], re.M)
    assert {"list", "get", "tail", "replay", "--help"} <= {word for word, _ in listed}, shown
    assert ("list", "list deliveries, newest first") in listed  # with each verb's help
    assert "ARGS:deliveries list --status rejected" in shown["hookgate deliveries list --status rej"]
    assert "ARGS:deliveries tail --interval" in shown["hookgate deliveries tail --in"]
    value = shown["hookgate deliveries list --limit "]  # takes a value: no word is offered or listed
    assert "ARGS:deliveries list --limit\n" in value and " -- " not in value
    options = dict(re.findall(r"^(--\S+) +-- (.*)$", shown["hookgate deliveries list --"], re.M))
    assert options["--limit"].startswith("page size") and "--status" in shown["hookgate deliveries list --"]


def test_the_new_verbs_read_and_change_what_the_api_does(admin: Admin):
    env, autopilot_id, trigger_id = admin.env, admin.autopilot["id"], admin.trigger["id"]
    assert ok_json("me", env=env)["member_id"] == admin.owner_id
    before = ok_json("autopilots", "get", autopilot_id, env=env)
    assert before["title"] == "t"
    updated = ok_json("autopilots", "update", autopilot_id, "--instructions", "label it", "--run-timeout", "600",
                      env=env)
    assert (updated["instructions"], updated["run_timeout_s"], updated["version"]) == (
        "label it", 600, before["version"] + 1)  # a real change publishes a rule version
    changed = ok_json("triggers", "update", trigger_id, "--provider", "github", "--event", "github.push",
                      "--rate-limit", "7", env=env)
    assert (changed["provider"], changed["event_filters"], changed["rate_limit_per_minute"]) == (
        "github", ["github.push"], 7)
    assert ok_json("triggers", "update", trigger_id, "--all-events", env=env)["event_filters"] == []

    run = ok_json("runs", "start", autopilot_id, env=env)
    tasks = ok_json("tasks", "list", "--run", run["run_id"], env=env)["items"]
    assert [t["run_id"] for t in tasks] in ([], [run["run_id"]])  # no worker here: perhaps not dispatched yet
    assert ok_json("issues", "list", "--autopilot", autopilot_id, env=env) == {"items": [], "next_cursor": None}
    missing = hookgate("issues", "update", ZERO, "--status", "done", env=env)
    assert missing.returncode == 1 and "404" in missing.stderr

    member = ok_json("members", "create", "--name", "ann", "--email", "ann@example.com", env=env)
    assert member["role"] == "member" and member["api_key"].startswith("hgk_")
    ann = env | {"HOOKGATE_API_KEY": member["api_key"]}
    assert ok_json("me", env=ann)["member_id"] == member["id"]
    refused = hookgate("audit", "list", env=ann)  # owners and admins only
    assert refused.returncode == 1 and "403" in refused.stderr, refused.stderr
    key = ok_json("keys", "create", env=ann)  # for the caller: found with /v1/me
    assert key["member_id"] == member["id"] and key["api_key"].startswith("hgk_")
    assert ok_json("keys", "revoke", key["id"], env=env)["revoked_at"] is not None
    gone = hookgate("me", env=env | {"HOOKGATE_API_KEY": key["api_key"]})
    assert gone.returncode == 1 and "401" in gone.stderr
    actions = {entry["action"] for entry in ok_json("audit", "list", env=env)["items"]}
    assert {"KEY_CREATE", "KEY_REVOKE"} <= actions, actions

    assert ok_json("triggers", "delete", trigger_id, env=env)["deleted_at"] is not None
    assert httpx.post(f"{admin.gateway.url}/hooks/{admin.trigger['token']}", json={}, timeout=10).status_code == 404
    assert ok_json("autopilots", "archive", autopilot_id, env=env)["status"] == "archived"
    agent_id = ok_json("agents", "list", env=env)["items"][0]["id"]
    assert ok_json("agents", "archive", agent_id, env=env)["archived_at"] is not None


def test_a_one_time_credential_is_said_to_be_shown_once(admin: Admin):
    pull = hookgate("agents", "create", "--name", "puller", "--pull", env=admin.env)
    assert pull.returncode == 0 and "hgr_" in pull.stdout
    assert pull.stderr == ("hookgate: runtime_token shown only this once: keep it now (the API never shows it "
                           "again, only its last characters)\n"), pull.stderr
    token = next(line.split()[1] for line in pull.stdout.splitlines() if line.startswith("runtime_token"))
    assert token.startswith("hgr_")
    member = hookgate("members", "create", "--name", "bob", env=admin.env)
    assert member.returncode == 0 and "api_key shown only this once" in member.stderr
    listed = hookgate("agents", "list", env=admin.env)
    assert listed.returncode == 0 and listed.stderr == ""  # nothing secret, nothing said


def test_a_custom_trigger_is_made_from_a_scheme_file_and_a_public_key_file(admin: Admin, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    env, key = admin.env, ed25519.Ed25519PrivateKey.generate()
    scheme = {"kind": "public_key", "algorithm": "ed25519", "header": "X-Signature-Ed25519", "encoding": "hex",
              "timestamp_header": "X-Signature-Timestamp", "signed": "{timestamp}{body}"}
    (tmp_path / "scheme.json").write_text(json.dumps(scheme))
    (tmp_path / "key.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    made = ok_json("triggers", "create", "--autopilot", admin.autopilot["id"], "--provider", "custom",
                   "--signature-file", str(tmp_path / "scheme.json"), "--event-source", "json:/data/name",
                   "--dedupe-source", "json:/id", env=env)
    assert made["signature"]["algorithm"] == "ed25519" and made["event_source"] == "json:/data/name"
    assert made["dedupe_key_source"] == "json:/id"
    assert ok_json("triggers", "set-secret", made["id"], "--public-key", f"@{tmp_path / 'key.pem'}", env=env)["hint"]
    raw, ts = b'{"type": 2, "id": "42", "data": {"name": "blep"}}', str(int(time.time()))
    headers = {"content-type": "application/json", "X-Signature-Timestamp": ts,
               "X-Signature-Ed25519": key.sign(ts.encode() + raw).hex()}
    answer = httpx.post(f"{admin.gateway.url}/hooks/{made['token']}", content=raw, headers=headers, timeout=10)
    assert answer.status_code == 200 and answer.json()["status"] == "accepted", answer.text
    assert ok_json("deliveries", "get", answer.json()["delivery_id"], env=env)["event"] == "blep"
    back = ok_json("triggers", "update", made["id"], "--provider", "discord", "--signature-file", "none", env=env)
    assert (back["provider"], back["signature"]) == ("discord", None)  # the preset's own scheme, the same key
    bad = hookgate("triggers", "create", "--autopilot", admin.autopilot["id"], "--signature-file",
                   str(tmp_path / "absent.json"), env=env)
    assert bad.returncode == 2 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr


def test_a_payload_filter_is_set_from_json_or_a_file_tested_and_removed(admin: Admin, tmp_path):
    env = admin.env
    wanted = {"and": [{"path": "/action", "eq": "opened"}, {"path": "/amount", "gte": 100}]}
    (tmp_path / "filter.json").write_text(json.dumps(wanted))
    made = ok_json("triggers", "create", "--autopilot", admin.autopilot["id"], "--payload-filter",
                   f"@{tmp_path / 'filter.json'}", env=env)
    assert made["payload_filter"] == wanted
    small = httpx.post(f"{admin.gateway.url}/hooks/{made['token']}", json={"action": "opened", "amount": 5},
                       timeout=10)
    assert small.json()["status"] == "ignored", small.text
    tested = ok_json("triggers", "filter-test", made["id"], "--delivery", small.json()["delivery_id"], env=env)
    assert tested == {"matches": False, "node": "/and/1", "reason": "/amount is 5, not at least 100"}
    table = hookgate("triggers", "filter-test", made["id"], "--payload", '{"action": "opened", "amount": 100}',
                     env=env)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split() == ["matches", "True"]
    candidate = ok_json("triggers", "filter-test", made["id"], "--payload", '{"action": "closed"}', "--filter",
                        '{"not": {"path": "/action", "eq": "opened"}}', env=env)
    assert candidate["matches"] is True
    changed = ok_json("triggers", "update", made["id"], "--payload-filter", '{"path": "/action", "eq": "closed"}',
                      env=env)
    assert changed["payload_filter"] == {"path": "/action", "eq": "closed"}
    cleared = ok_json("triggers", "update", made["id"], "--no-payload-filter", env=env)
    assert cleared["payload_filter"] is None
    bad = hookgate("triggers", "update", made["id"], "--payload-filter", '{"or": []}', env=env)
    assert bad.returncode != 0 and "at /or:" in bad.stderr and "Traceback" not in bad.stderr
    not_json = hookgate("triggers", "update", made["id"], "--payload-filter", "{oops", env=env)
    assert not_json.returncode == 2 and "not valid JSON" in not_json.stderr
