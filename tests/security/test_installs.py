"""Reproducible installs: every dependency bounded below a major version, the whole tree pinned with hashes.

``pyproject.toml`` (runtime dependencies, the test extra, the build requirement) must bound every package
below a major version (``<N``); ``requirements.lock`` must pin every one of them, within those bounds, and
hold a SHA-256 for each pin of the tree; CI must install from the lock with hashes required.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = [r for group in project["project"]["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in project["project"]["dependencies"] + extras + project["build-system"]["requires"]]


def _locked() -> dict[str, tuple[Version, int]]:
    """``{name: (pinned version, number of hashes)}`` for every pin of the lock file."""
    pins = {}
    for block in re.split(r"\n(?=[^\s#])", (ROOT / "requirements.lock").read_text()):
        if (pin := re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", block)) is not None:
            pins[canonicalize_name(pin[1])] = (Version(pin[2]), block.count("--hash=sha256:"))
    return pins


def test_every_declared_dependency_has_an_upper_bound_at_a_major_version():
    for req in _declared():
        uppers = [Version(s.version) for s in req.specifier if s.operator == "<"]
        assert uppers, f"{req}: no upper bound"
        assert not any(min(uppers).release[1:]), f"{req}: the upper bound is not a major version"


def test_the_lock_pins_every_declared_dependency_within_its_bounds_and_hashes_every_pin():
    locked = _locked()
    assert len(locked) > 50  # the whole tree, not only the direct dependencies
    for req in _declared():
        assert canonicalize_name(req.name) in locked, f"{req.name} is not locked"
        assert req.specifier.contains(locked[canonicalize_name(req.name)][0], prereleases=True), req
    assert [name for name, (_, hashes) in locked.items() if hashes == 0] == []


def test_ci_installs_the_lock_with_hashes_required():
    assert "pip install -q --require-hashes -r requirements.lock" in (ROOT / ".ci" / "run").read_text()
