"""README.md as written: the "Run it" walkthrough against a real ``hookgate serve``; the settings table.

The walkthrough's fenced ``sh`` blocks run with bash as they stand (only the port differs), with a real agent on
127.0.0.1:9999 that must verify the push with the secret the walkthrough kept; each command's trailing ``# {…}``
comment must match what it printed. Every setting ``hookgate --help`` lists is in the table, with its default.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import ROOT
from tests.servers import QuietHandler, serving_thread

README = (ROOT / "README.md").read_text()
AGENT_PORT = 9999  # the walkthrough's agent URL, as written


def section(title: str) -> str:
    """The text of the README's ``## title`` section."""
    return README.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def sh_blocks(text: str) -> list[str]:
    """The fenced ``sh`` blocks of ``text``."""
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def expectations(script: str) -> list[re.Pattern[str]]:
    """One pattern per command whose trailing comment shows its answer (``{…}``); ``…`` stands for anything."""
    shown = re.findall(r"  # (\{.*)$", script, re.M)
    return [re.compile("^" + ".*".join(re.escape(part) for part in comment.split("…")) + "$") for comment in shown]


@pytest.fixture
def agent() -> Iterator[list[tuple[dict[str, str], bytes]]]:
    """The walkthrough's agent on 127.0.0.1:9999: records each push (headers, body) and answers 200."""
    pushes: list[tuple[dict[str, str], bytes]] = []

    class Agent(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            pushes.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", AGENT_PORT), Agent)
    except OSError as exc:
        pytest.skip(f"port {AGENT_PORT}, the README's agent port, is taken on this machine: {exc}")
    with serving_thread(server):
        yield pushes


def _hookgate_wrapper(directory: Path) -> None:
    """``.venv/bin/hookgate`` in ``directory``, running this checkout's CLI with this interpreter."""
    bin_dir = directory / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "hookgate"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m hookgate.cli "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the walkthrough uses curl, which is not installed")
def test_readme_walkthrough_runs_as_written_and_prints_what_its_comments_say(spawn, tmp_path, agent):
    blocks = sh_blocks(section("Run it (one command, fresh machine)"))
    assert len(blocks) == 3 and "hookgate serve" in blocks[0]  # installing is not this test's business
    data_dir = tmp_path / ".hookgate"
    serve = spawn.start("serve", gateway=True, extra_env={"HOOKGATE_DATA_DIR": str(data_dir),
                                                          "HOOKGATE_PUBLIC_URL": ""})  # the default
    serve.wait_ready(60)
    _hookgate_wrapper(tmp_path)
    script = "\n".join(blocks[1:]).replace("http://127.0.0.1:8080", serve.url)
    # Not on a terminal, `serve` filed the first owner key where the README says.
    env = {**os.environ, **spawn.env, "KEY": (data_dir / "first-owner-key").read_text().strip()}
    done = subprocess.run(["bash", "-euc", script + '\nprintf "kept: %s\\n" "$SECRET"\n'], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    *printed, kept = done.stdout.splitlines()
    patterns = expectations("\n".join(blocks[1:]))
    assert len(printed) == len(patterns) == 5, done.stdout
    for line, pattern in zip(printed, patterns, strict=True):
        assert pattern.match(line), (line, pattern.pattern)
    accepted, duplicate, runs = (json.loads(line) for line in printed[-3:])
    assert (accepted["status"], duplicate["status"]) == ("accepted", "duplicate")
    assert duplicate["delivery_id"] == accepted["delivery_id"] and accepted["run_id"]
    assert runs["items"][0]["id"] == accepted["run_id"]

    secret = kept.removeprefix("kept: ")
    assert secret.startswith("whsec_")
    push = _first_push(agent)
    import standardwebhooks

    task = standardwebhooks.Webhook(secret).verify(push[1], push[0])  # raises if not signed with the kept secret
    assert task["run_id"] == accepted["run_id"]


def _first_push(pushes: list[tuple[dict[str, str], bytes]], timeout: float = 30) -> tuple[dict[str, str], bytes]:
    deadline = time.monotonic() + timeout
    while not pushes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pushes, "the agent received no push"
    return pushes[0]


def _help_settings() -> dict[str, str | None]:
    """Each variable ``hookgate --help`` lists, with the default it states (None when it states none)."""
    from hookgate.cli import EPILOG

    found: dict[str, str | None] = {}
    for entry in re.split(r"\n  (?=HOOKGATE_)", EPILOG.split("environment:", 1)[1]):
        names = re.findall(r"HOOKGATE_[A-Z_]+", entry.split("  ", 1)[0])
        default = re.search(r"\(default ([^;)]+)", entry)
        values = default.group(1).strip().split(":") if default and len(names) == 2 else [
            default.group(1).strip() if default else None]
        found.update(zip(names, values * (len(names) // len(values)), strict=True))
    return found


def _table() -> dict[str, str]:
    """The README configuration table: variable -> default column (split per variable of a paired row)."""
    rows: dict[str, str] = {}
    for line in section("Configuration").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")] if line.startswith("| `HOOKGATE_") else []
        if cells:
            names, defaults = cells[0].split(" / "), cells[1].split(" / ")
            rows.update(zip((n.strip("`") for n in names), defaults if len(defaults) == len(names)
                            else defaults * len(names), strict=True))
    return rows


def test_every_setting_hookgate_help_lists_is_in_the_readme_table_with_the_same_default() -> None:
    table = _table()
    listed: dict[str, Any] = _help_settings()
    assert len(listed) >= 9 and set(listed) <= set(table), sorted(set(listed) - set(table))
    for name, default in listed.items():
        if default is None:
            continue
        words = {"none": ("empty", "unset", "none"), "./.hookgate": ("`./.hookgate`",)}.get(default, (f"`{default}`",))
        assert table[name].startswith(words), (name, default, table[name])
