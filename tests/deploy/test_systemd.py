"""deploy/systemd/: the units pass ``systemd-analyze verify`` and keep the settings the docs promise.

``verify`` also checks that each ExecStart= binary exists: the units name /opt/hookgate/bin/hookgate (where
docs/OPERATIONS.md installs it), so they are verified as copies naming this checkout's ``hookgate`` instead;
nothing else is changed. Needs only systemd-analyze (no Docker), so it runs in the ordinary suite.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT

UNITS = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/hookgate/bin/hookgate"
ROLES = ("gateway", "worker", "scheduler", "serve")


def _unit(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / name)
    return parser


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    hookgate = Path(sys.executable).parent / "hookgate"
    assert hookgate.exists(), "the project is not installed in this interpreter's environment"
    units = sorted(UNITS.glob("*.service"))
    assert {u.name for u in units} == {f"hookgate-{r}.service" for r in (*ROLES, "migrate")}
    for unit in units:
        text = unit.read_text()
        assert f"ExecStart={INSTALLED} " in text
        (tmp_path / unit.name).write_text(text.replace(INSTALLED, str(hookgate)))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", *(u.name for u in units)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    # verify does fail on a broken unit (else this test could not fail).
    (tmp_path / "hookgate-broken.service").write_text("[Service]\nExecStart=relative/path\nType=nonsense\n")
    broken = subprocess.run(["systemd-analyze", "verify", "--man=no", "hookgate-broken.service"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode != 0 or broken.stderr.strip()


def test_role_units_drain_on_sigterm_for_longer_than_the_shutdown_deadline_and_are_hardened() -> None:
    from hookgate.settings import Settings

    for role in ROLES:
        service = _unit(f"hookgate-{role}.service")["Service"]
        assert service["Type"] == "exec"  # Hookgate does not notify systemd of readiness
        assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
        assert float(service["TimeoutStopSec"]) > Settings.model_fields["shutdown_deadline"].default
        assert "ExecReload" not in service  # SIGHUP would end the process at once, not reload it
        assert service["EnvironmentFile"].lstrip("-") == "/etc/hookgate/hookgate.env"
        for option in ("DynamicUser", "NoNewPrivileges", "ProtectHome", "PrivateTmp"):
            assert service[option] == "yes", (role, option)
        assert service["ProtectSystem"] == "strict" and service["CapabilityBoundingSet"] == ""
    assert _unit("hookgate-serve.service")["Service"]["StateDirectory"] == "hookgate"
    assert _unit("hookgate-migrate.service")["Service"]["Type"] == "oneshot"
