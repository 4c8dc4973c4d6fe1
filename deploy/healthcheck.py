#!/usr/bin/env python3
"""Container health check: ``GET /readyz`` on the port of the role this container runs (exit 0 = healthy).

The role is read from the command of process 1 (the image's ``hookgate ROLE``): ``serve`` and ``gateway``
answer on ``HOOKGATE_PORT``; ``worker`` and ``scheduler`` on ``HOOKGATE_METRICS_PORT`` (without one there
is nothing to ask, and a live process is all that can be said). ``migrate`` and the client commands are
healthy while they run. Standard library only: the image has no curl.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

ROLES_ON_HTTP_PORT = ("serve", "gateway")
ROLES_ON_METRICS_PORT = ("worker", "scheduler")


def role() -> str:
    """The hookgate command process 1 runs (the first argument after ``hookgate``), or ''."""
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            argv = [arg.decode(errors="replace") for arg in fh.read().split(b"\0") if arg]
    except OSError:
        return ""
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == "hookgate" and i + 1 < len(argv):
            return argv[i + 1]
    return ""


def main() -> int:
    """Probe the role's /readyz; print why it is not ready."""
    command = role()
    if command in ROLES_ON_HTTP_PORT:
        port = os.environ.get("HOOKGATE_PORT", "8080")
    elif command in ROLES_ON_METRICS_PORT and os.environ.get("HOOKGATE_METRICS_PORT"):
        port = os.environ["HOOKGATE_METRICS_PORT"]
    else:
        return 0
    host = os.environ.get("HOOKGATE_HOST", "127.0.0.1")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=4) as answer:
            return 0 if answer.status == 200 else 1
    except urllib.error.HTTPError as exc:
        print(f"/readyz answered {exc.code}: {exc.read(300).decode(errors='replace')}")
    except OSError as exc:
        print(f"/readyz did not answer: {exc}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
