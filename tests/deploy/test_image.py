"""The image: non-root, no compiler or package installer, no secret, under its size goal, healthy on /readyz."""

from __future__ import annotations

import json

import pytest

from tests.deploy.stack import Images, run

# The first test of a session also builds the images (minutes on a loaded machine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

#: The goal for the image on the Debian 12 minbase test base (docs/OPERATIONS.md states the measured size).
SIZE_GOAL_MB = 200


def in_image(images: Images, script: str) -> str:
    """Run a shell script in a throwaway container of the image (as its user); its stdout."""
    args = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", images.hookgate, "-c", script]
    return run(args).stdout


def test_runs_as_a_dedicated_non_root_user(images: Images):
    assert in_image(images, "id -u; id -g; id -un").split() == ["10001", "10001", "hookgate"]
    config = json.loads(run(["docker", "image", "inspect", images.hookgate]).stdout)[0]["Config"]
    assert config["User"] == "hookgate:hookgate"
    assert config["Entrypoint"] == ["hookgate"] and config["Cmd"] == ["serve"]
    assert config["Healthcheck"]["Test"] == ["CMD", "hookgate-healthcheck"]


def test_has_no_compiler_linker_or_package_installer(images: Images):
    found = in_image(images, "for c in cc gcc g++ c++ ld as strip make pip pip3; do command -v $c; done; "
                             "ls /opt/hookgate/lib/python3*/site-packages | grep -iE '^(pip|setuptools|wheel)' || true")
    assert found.strip() == ""
    tests_dirs = in_image(images, "find /opt/hookgate -type d -name tests | head -5")
    assert tests_dirs.strip() == ""


def test_bakes_in_no_secret_and_no_test_tools(images: Images):
    config = json.loads(run(["docker", "image", "inspect", images.hookgate]).stdout)[0]["Config"]
    names = {entry.split("=", 1)[0] for entry in config["Env"]}
    assert not names & {"HOOKGATE_SECRET_KEY", "HOOKGATE_DATABASE_URL", "HOOKGATE_DIRECT_DATABASE_URL"}
    modules = in_image(images, "/opt/hookgate/bin/python -c 'import importlib.util as u; "
                               "print([m for m in (\"pytest\", \"mypy\", \"stripe\", \"playwright\", \"hookgate\") "
                               "if u.find_spec(m)])'")
    assert modules.strip() == "['hookgate']"
    # The build stage's CA certificates stay in the build stage.
    history = run(["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", images.hookgate]).stdout
    assert "EXTRA_CA_CERTS" not in history


def test_is_under_its_size_goal(images: Images):
    size = int(run(["docker", "image", "inspect", "--format", "{{.Size}}", images.hookgate]).stdout)
    assert size / 1e6 < SIZE_GOAL_MB, f"{size / 1e6:.0f} MB"


def test_every_role_is_a_command_of_the_one_image(images: Images):
    for role in ("serve", "gateway", "worker", "scheduler", "migrate"):
        answer = run(["docker", "run", "--rm", "--network", "none", images.hookgate, role, "--help"]).stdout
        assert answer.startswith(f"usage: hookgate {role}")
    # Without a database URL or a secret key, a role says what is missing in one line (nothing baked in).
    done = run(["docker", "run", "--rm", "--network", "none", "-e", "HOOKGATE_DATABASE_URL=postgresql://x@127.0.0.1:1/x",
                images.hookgate, "worker"], check=False)
    assert done.returncode == 2 and "HOOKGATE_SECRET_KEY" in done.stderr, done.stderr
