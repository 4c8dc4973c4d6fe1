"""The real ``hookgate`` CLI as a subprocess: bootstrap, migrate, and one-line configuration errors."""

import json

import pytest

from tests.acceptance.cli import hookgate
from tests.conftest import TEST_SECRET_KEY


def test_bootstrap_json_is_idempotent_per_workspace_and_prints_a_new_key_each_time(db_url):
    env = {"HOOKGATE_DATABASE_URL": db_url, "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY}
    first = json.loads(hookgate("bootstrap", "--workspace", "ops", "--json", env=env).stdout)
    second = json.loads(hookgate("bootstrap", "--workspace", "ops", "--json", env=env).stdout)
    assert set(first) == {"workspace_id", "member_id", "api_key"}
    assert first["workspace_id"] == second["workspace_id"] and first["member_id"] == second["member_id"]
    assert first["api_key"] != second["api_key"] and first["api_key"].startswith("hgk_")


def test_migrate_on_a_current_database_applies_nothing(db_url):
    out = hookgate("migrate", env={"HOOKGATE_DATABASE_URL": db_url, "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"applied": []}


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"HOOKGATE_DATABASE_URL": "mysql://nope"}, "HOOKGATE_DATABASE_URL"),
        ({"HOOKGATE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x"}, "unreachable"),
        ({"HOOKGATE_SECRET_KEY": "too-short"}, "HOOKGATE_SECRET_KEY"),
        ({"HOOKGATE_PORT": "eighty"}, "HOOKGATE_PORT"),
        ({"HOOKGATE_TRUSTED_PROXIES": "10.0.0.0/33"}, "HOOKGATE_TRUSTED_PROXIES"),
        ({"HOOKGATE_PUSH_RETRY_SCHEDULE": "5s,soon"}, "HOOKGATE_PUSH_RETRY_SCHEDULE"),
        ({"HOOKGATE_TASK_MAX_ATTEMPTS": "5"}, "HOOKGATE_PUSH_RETRY_SCHEDULE"),
    ],
)
def test_bad_configuration_fails_at_start_with_one_clear_line(env, needle, db_url):
    full = {"HOOKGATE_DATABASE_URL": db_url, "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY} | env
    out = hookgate("migrate", env=full, timeout=30)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("hookgate: error:") and needle in lines[0]
    assert "Traceback" not in out.stderr


def test_help_reads_like_a_manual_and_names_the_environment():
    out = hookgate("--help", env={})
    assert out.returncode == 0
    for word in ("serve", "gateway", "worker", "scheduler", "migrate", "bootstrap", "HOOKGATE_DATABASE_URL"):
        assert word in out.stdout
    for word in ("client commands:", "hookgate send", "hookgate me", "cli.json", "HOOKGATE_API_KEY"):
        assert word in out.stdout, word
    serve = hookgate("serve", "--help", env={})
    assert "HOOKGATE_PORT" in serve.stdout


@pytest.mark.parametrize("name", ["HOOKGATE_TASK_MAX_ATTEMPTS", "HOOKGATE_TASK_BACKOFF_BASE_S",
                                  "HOOKGATE_TASK_BACKOFF_CAP_S"])
def test_a_removed_task_setting_stops_the_gateway_at_start_with_one_line(name, db_url):
    env = {"HOOKGATE_DATABASE_URL": db_url, "HOOKGATE_SECRET_KEY": TEST_SECRET_KEY, "HOOKGATE_PORT": "0", name: "3"}
    out = hookgate("gateway", env=env, timeout=30)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"hookgate: error: {name} is no longer read: use HOOKGATE_PUSH_RETRY_SCHEDULE")
