"""``<data dir>/cli.json``: where ``hookgate serve`` tells the client commands on this machine its address.

``serve`` writes ``{"url", "dashboard", "pid"}`` once its port is bound and removes the file when it stops,
if the file is still its own (a later ``serve`` on the same data dir may have replaced it). A ``serve`` killed
with SIGKILL leaves it behind: the next start replaces it, and a client that cannot reach the address says
it came from this file. The client commands read it only when neither ``--url`` nor ``HOOKGATE_URL``
(nor ``HOOKGATE_HOST``/``HOOKGATE_PORT``) says where the gateway is.

It holds no credential: the owner key has its own file, which the operator is told to delete once read; a
copy here would outlive that. Mode 0600 all the same, like everything in the data dir.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

CLI_FILE = "cli.json"

log = logging.getLogger("hookgate.cli")


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a server bound to ``host:port`` (a wildcard read as loopback)."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def write_private(data_dir: Path, name: str, text: str) -> Path:
    """Write ``<data dir>/<name>`` whole (a reader never sees half of it), mode 0600 from its creation."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / name
    staging = data_dir / f".{name}.{os.getpid()}"
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)
    return path


@contextlib.contextmanager
def published(data_dir: Path, url: str) -> Iterator[Path | None]:
    """``cli.json`` naming ``url`` while the block runs; removed after, if still this process's own.

    A data dir that cannot be written (read-only, another user's) is a warning, not a failed start.
    """
    document = {"url": url, "dashboard": f"{url}/dashboard", "pid": os.getpid()}
    try:
        path: Path | None = write_private(data_dir, CLI_FILE, json.dumps(document) + "\n")
    except OSError as exc:
        log.warning("cannot write %s: the client commands need HOOKGATE_URL", data_dir / CLI_FILE,
                    extra={"error": str(exc)})
        path = None
    try:
        yield path
    finally:
        if path is not None and _owner(path) == os.getpid():
            with contextlib.suppress(OSError):
                path.unlink()


def read_url(data_dir: Path) -> str | None:
    """The URL ``serve`` left in ``<data dir>/cli.json``; None when there is none or it does not parse."""
    try:
        found = json.loads((data_dir / CLI_FILE).read_text())
    except (OSError, ValueError):
        return None
    url = found.get("url") if isinstance(found, dict) else None
    return url.rstrip("/") if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def _owner(path: Path) -> int | None:
    try:
        pid = json.loads(path.read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None
