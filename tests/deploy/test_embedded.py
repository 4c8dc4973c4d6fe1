"""deploy/compose.embedded.yaml: the README's walkthrough against ``serve`` in a container, then a restart.

The walkthrough's shell blocks run as written (only the address differs; ``.venv/bin/hookgate`` is the
image's ``hookgate`` run in the container), with the README's agent on the host at 127.0.0.1:9999: the
webhook is accepted then deduplicated, the agent gets a push it verifies with the kept signing secret, and
the run completes. The stack is then stopped and started again: the same key, run, dedupe record and
secrets are there (one volume holds the database and the generated key), and a new webhook goes through.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import standardwebhooks

from tests.acceptance.test_readme import agent, expectations, section, sh_blocks  # noqa: F401 (agent: a fixture)
from tests.deploy.stack import Images, Stack
from tests.processes import ROOT, free_port

# The first test of a session also builds the images (minutes on a loaded machine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _wrapper(directory: Path, container: str) -> None:
    """``.venv/bin/hookgate`` in ``directory``: the image's command, run in the container."""
    bin_dir = directory / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "hookgate"
    wrapper.write_text(f'#!/bin/sh\nexec docker exec -i {container} hookgate "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)


def _wait_ready(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url}/readyz never answered 200")


def _wait_run(client: httpx.Client, run_id: str, status: str, timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        run = dict(client.get(f"/v1/runs/{run_id}").raise_for_status().json())
        if run["status"] == status or time.monotonic() > deadline:
            assert run["status"] == status, run
            return run
        time.sleep(0.3)


def _pushes_for(pushes: list[tuple[dict[str, str], bytes]], run_id: str, secret: str, timeout: float = 60) -> int:
    """How many pushes of ``run_id`` the agent got (at least one, each verified with ``secret``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mine = [p for p in list(pushes) if json.loads(p[1]).get("run_id") == run_id]
        if mine:
            for headers, body in mine:
                standardwebhooks.Webhook(secret).verify(body, headers)  # raises unless signed with the secret
            return len(mine)
        time.sleep(0.1)
    raise AssertionError(f"the agent received no push of run {run_id}")


def test_readme_walkthrough_in_the_embedded_container_and_data_kept_across_a_restart(
        images: Images, tmp_path: Path, agent: list[tuple[dict[str, str], bytes]]) -> None:  # noqa: F811
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stack = Stack("compose.embedded.yaml", {"HOOKGATE_IMAGE": images.hookgate, "HOOKGATE_PORT": str(port)})
    try:
        stack.compose("up", "-d", "--no-build")
        _wait_ready(url, 120)
        stack.wait_healthy(["hookgate"], 60)  # the image's own health check asks /readyz
        container = stack.container("hookgate")
        # Not a terminal: the first owner key is in the 0600 file on the volume, owned by the image's user.
        mode = stack.exec("hookgate", "stat", "-c", "%a %U", "/var/lib/hookgate/first-owner-key").split()
        assert mode == ["600", "hookgate"]
        key = stack.exec("hookgate", "cat", "/var/lib/hookgate/first-owner-key").strip()
        assert key.startswith("hgk_") and key not in stack.logs("hookgate")

        blocks = sh_blocks(section("Run it (one command, fresh machine)"))
        script = "\n".join(blocks[1:]).replace("http://127.0.0.1:8080", url)
        _wrapper(tmp_path, container)
        env = {**os.environ, "KEY": key}
        done = subprocess.run(["bash", "-euc", script + '\nprintf "kept: %s %s\\n" "$SECRET" "$URL"\n'], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        *printed, kept = done.stdout.splitlines()
        patterns = expectations("\n".join(blocks[1:]))
        assert len(printed) == len(patterns) == 5, done.stdout
        for line, pattern in zip(printed, patterns, strict=True):
            assert pattern.match(line), (line, pattern.pattern)
        accepted, duplicate, _ = (json.loads(line) for line in printed[-3:])
        assert (accepted["status"], duplicate["status"]) == ("accepted", "duplicate")
        secret, hook_url = kept.removeprefix("kept: ").split()
        run_id = accepted["run_id"]
        with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=10) as client:
            assert _pushes_for(agent, run_id, secret) >= 1
            _wait_run(client, run_id, "completed")

        stack.compose("stop", "-t", "30")
        assert stack.health("hookgate") == "exited"
        stack.compose("start")
        _wait_ready(url, 120)
        with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=10) as client:
            assert client.get("/v1/me").status_code == 200  # the same workspace and key
            _wait_run(client, run_id, "completed", timeout=5)  # the same run
            again = client.post(hook_url, json={"event": "order.paid", "id": 42},
                                headers={"idempotency-key": "evt-1"}).json()
            assert (again["status"], again["delivery_id"]) == ("duplicate", accepted["delivery_id"]), again
            fresh = client.post(hook_url, json={"event": "order.paid", "id": 43},
                                headers={"idempotency-key": "evt-2"}).json()
            assert fresh["status"] == "accepted"
            # Pushed and signed with the same agent secret: the generated encryption key survived too.
            assert _pushes_for(agent, fresh["run_id"], secret) >= 1
            _wait_run(client, fresh["run_id"], "completed")
    finally:
        stack.down()
    assert not stack.compose("ps", "-q").stdout.strip()


def test_readme_container_section_is_the_build_and_the_stack_this_test_runs() -> None:
    blocks = sh_blocks(section("Run it in a container"))
    assert len(blocks) == 1
    commands = [line.split("#")[0].strip() for line in blocks[0].splitlines() if line.strip()]
    assert commands == ["docker build -t hookgate:latest .", "docker-compose -f deploy/compose.embedded.yaml up -d"]
    # The stack runs the image that command tagged unless told otherwise (the test sets HOOKGATE_IMAGE).
    compose = (ROOT / "deploy" / "compose.embedded.yaml").read_text()
    assert "image: ${HOOKGATE_IMAGE:-hookgate:latest}" in compose
