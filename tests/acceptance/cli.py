"""The real ``hookgate`` CLI as a subprocess, with none of the test run's own ``HOOKGATE_`` settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.processes import ROOT

#: How to start ``hookgate``: arguments follow.
ARGV = [sys.executable, "-m", "hookgate.cli"]


def cli_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a CLI subprocess: ``extra``, and no HOOKGATE_ setting of the test run leaks in."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKGATE_")}
    return clean | extra | {"PYTHONPATH": str(ROOT)}


def hookgate(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``hookgate ARGS…`` with ``env`` to its end; its exit code and output."""
    return subprocess.run([*ARGV, *args], env=cli_env(env), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def hookgate_json(*args: str, env: dict[str, str]) -> Any:
    """``hookgate ARGS --json``, which must succeed; its JSON answer."""
    done = hookgate(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
