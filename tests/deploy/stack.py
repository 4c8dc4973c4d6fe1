"""Docker and Compose as the deploy tests drive them: build the images, run a stack, clean up after it.

Everything goes through the real ``docker`` command and the Compose command Debian provides
(``docker-compose``, or the ``docker compose`` plugin where it is installed). Containers use the host's
network; each service gets a free loopback port through the stack's variables.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import ROOT

#: The base the tests build on, made from Debian's packages by tests/deploy/make-base (no registry needed).
BASE = os.environ.get("HOOKGATE_TEST_BASE_IMAGE", "hookgate-base:local")
MAKE_BASE = ROOT / "tests" / "deploy" / "make-base"


def run(args: Sequence[str], *, timeout: float = 600, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise with its output (the test's report shows why)."""
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False,
                          env=None if env is None else {**os.environ, **env}, cwd=ROOT)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def compose_command() -> list[str]:
    """``docker-compose`` (Debian's package) or ``docker compose`` (the v2 plugin), whichever is installed."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if run(["docker", "compose", "version"], check=False).returncode == 0:
        return ["docker", "compose"]
    raise RuntimeError("neither docker-compose nor the docker compose plugin is installed")


def extra_ca_certs() -> str:
    """Certificates this machine trusts beyond Debian's bundle (a TLS-intercepting proxy's), for the build."""
    local = Path("/usr/local/share/ca-certificates")
    return "".join(p.read_text() for p in sorted(local.glob("*.crt"))) if local.is_dir() else ""


@dataclass
class Images:
    """The images one test session built (and removes): Hookgate's and the PostgreSQL/PgBouncer one."""

    hookgate: str
    postgres: str
    made_base: bool = False
    build_s: dict[str, float] = field(default_factory=dict)

    @classmethod
    def build(cls) -> Images:
        """Make the base if it is missing, then build both images on it (tags unique to this session)."""
        tag = uuid.uuid4().hex[:8]
        images = cls(f"hookgate-test:{tag}", f"hookgate-postgres-test:{tag}")
        if run(["docker", "image", "inspect", BASE], check=False).returncode != 0:
            start = time.monotonic()
            run([str(MAKE_BASE), BASE], timeout=1200)
            images.made_base = True
            images.build_s["base"] = time.monotonic() - start
        try:
            start = time.monotonic()
            run(["docker", "build", "-q", "--network", "host", "--build-arg", f"BASE={BASE}",
                 "--build-arg", f"EXTRA_CA_CERTS={extra_ca_certs()}", "-t", images.hookgate, "."], timeout=1200)
            images.build_s["hookgate"] = time.monotonic() - start
            start = time.monotonic()
            run(["docker", "build", "-q", "--network", "host", "--build-arg", f"BASE={BASE}",
                 "-t", images.postgres, "deploy/postgres"], timeout=1200)
            images.build_s["postgres"] = time.monotonic() - start
        except BaseException:
            images.remove()
            raise
        return images

    def remove(self) -> None:
        """Remove the images (and the base, if this session made it) and the build stages they left."""
        names = [self.hookgate, self.postgres] + ([BASE] if self.made_base else [])
        run(["docker", "rmi", "-f", *names], check=False)
        run(["docker", "image", "prune", "-f"], check=False)


@dataclass
class Stack:
    """One Compose project of a file in deploy/ (and override files), with its variables; ``down`` removes all."""

    file: str
    env: dict[str, str]
    overrides: list[Path] = field(default_factory=list)  # more Compose files, as an operator adds settings
    project: str = field(default_factory=lambda: f"hgtest{uuid.uuid4().hex[:8]}")

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Compose command on this project."""
        files = [ROOT / "deploy" / self.file, *self.overrides]
        return run([*compose_command(), *(arg for f in files for arg in ("-f", str(f))), "-p", self.project, *args],
                   env=self.env, timeout=timeout, check=check)

    _ids: dict[str, str] = field(default_factory=dict)

    def container(self, service: str) -> str:
        """The id of the (first) container of ``service`` (asked once: Compose v1 takes a second per call)."""
        if service not in self._ids:
            found = self.compose("ps", "-q", service).stdout.split()
            if not found:
                raise RuntimeError(f"no container for {service}")
            self._ids[service] = found[0]
        return self._ids[service]

    def exec(self, service: str, *args: str, timeout: float = 120) -> str:
        """Run a command in a service's running container; its stdout."""
        return run(["docker", "exec", self.container(service), *args], timeout=timeout).stdout

    def logs(self, service: str) -> str:
        """What a service's container printed (stdout and stderr)."""
        done = run(["docker", "logs", self.container(service)], check=False)
        return done.stdout + done.stderr

    def health(self, service: str) -> str:
        """A running container's health (starting, healthy, unhealthy), else its state (exited, …)."""
        return run(["docker", "inspect", "--format", "{{if and .State.Running .State.Health}}"
                    "{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}", self.container(service)]).stdout.strip()

    def wait_healthy(self, services: Sequence[str], timeout: float) -> None:
        """Until every service's container is healthy; raises with the laggards' logs."""
        deadline = time.monotonic() + timeout
        while True:
            waiting = [s for s in services if self.health(s) != "healthy"]
            if not waiting:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"===== {s} ({self.health(s)})\n{self.logs(s)[-2000:]}" for s in waiting)
                raise RuntimeError(f"not healthy after {timeout} s: {waiting}\n{tails}")
            time.sleep(1)

    def down(self) -> None:
        """Stop and remove the containers and the volumes of this project."""
        self.compose("down", "-v", "-t", "30", "--remove-orphans", check=False)
