"""Fixtures of the deploy tests: the images built once per session from the locally made base.

They need a Docker daemon, debootstrap (for the base) and Debian's mirror, and take minutes, so they run
only with ``HOOKGATE_TEST_DEPLOY=1`` (CI sets it; ``.ci/run`` installs and starts what they need).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.deploy.stack import Images, run

ENABLED = os.environ.get("HOOKGATE_TEST_DEPLOY") == "1"


@pytest.fixture(scope="session")
def images() -> Iterator[Images]:
    """Hookgate's image and the PostgreSQL/PgBouncer image, built for this session and removed after it."""
    if not ENABLED:
        pytest.skip("deploy tests run with HOOKGATE_TEST_DEPLOY=1 (Docker, debootstrap; see .ci/run)")
    if run(["docker", "info"], check=False).returncode != 0:
        pytest.fail("HOOKGATE_TEST_DEPLOY=1 but no Docker daemon answers (start dockerd)")
    built = Images.build()
    try:
        yield built
    finally:
        built.remove()
