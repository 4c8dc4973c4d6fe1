"""Settings from the environment: the retry schedule, the task settings it replaced, the database URLs."""

from __future__ import annotations

import os

import pytest

from hookgate.settings import REMOVED, ConfigError, load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOOKGATE_* variable of the machine running the tests leaks into these."""
    for name in list(os.environ):
        if name.startswith("HOOKGATE_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_removed_task_setting_in_the_environment_is_refused_naming_its_replacement(monkeypatch, name):
    assert name in {"HOOKGATE_TASK_MAX_ATTEMPTS", "HOOKGATE_TASK_BACKOFF_BASE_S", "HOOKGATE_TASK_BACKOFF_CAP_S"}
    monkeypatch.setenv(name, "5")
    with pytest.raises(ConfigError, match="HOOKGATE_PUSH_RETRY_SCHEDULE") as refused:
        load_settings()
    assert name in str(refused.value)


@pytest.mark.parametrize("text", ["", "5x", "0s", "-1s", "8d", ",".join(["1s"] * 21), "5s,,1m"])
def test_a_bad_push_retry_schedule_is_a_config_error_naming_it(monkeypatch, text):
    monkeypatch.setenv("HOOKGATE_PUSH_RETRY_SCHEDULE", text)
    with pytest.raises(ConfigError, match=r"^HOOKGATE_PUSH_RETRY_SCHEDULE: "):
        load_settings()


def test_a_good_push_retry_schedule_is_read(monkeypatch):
    assert load_settings().retry_schedule.attempts == 9  # the default
    monkeypatch.setenv("HOOKGATE_PUSH_RETRY_SCHEDULE", "10s, 2m,1h")
    schedule = load_settings().retry_schedule
    assert (schedule.delays, schedule.attempts) == ((10, 120, 3600), 4)


def test_the_direct_url_defaults_to_the_database_url_and_the_pooler_to_detection(monkeypatch):
    monkeypatch.setenv("HOOKGATE_DATABASE_URL", "postgresql://hookgate@pgbouncer:6432/hookgate")
    settings = load_settings()
    assert settings.direct_database_url is None and settings.pooler == "detect"
    monkeypatch.setenv("HOOKGATE_DIRECT_DATABASE_URL", "postgresql://hookgate@db:5432/hookgate")
    monkeypatch.setenv("HOOKGATE_POOLER", "transaction")
    settings = load_settings()
    assert settings.direct_database_url is not None and settings.pooler == "transaction"
    assert settings.direct_database_url.get_secret_value() == "postgresql://hookgate@db:5432/hookgate"


@pytest.mark.parametrize(("env", "needle"), [
    ({"HOOKGATE_DIRECT_DATABASE_URL": "postgresql://db/hookgate"}, "HOOKGATE_DIRECT_DATABASE_URL: "),
    ({"HOOKGATE_DATABASE_URL": "postgresql://db/h", "HOOKGATE_DIRECT_DATABASE_URL": "mysql://db/h"},
     "HOOKGATE_DIRECT_DATABASE_URL: "),
    ({"HOOKGATE_DATABASE_URL": "postgresql://db/h", "HOOKGATE_POOLER": "session"}, "HOOKGATE_POOLER: "),
])
def test_a_direct_url_without_a_database_url_or_an_unknown_pooler_is_a_config_error(monkeypatch, env, needle):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"^{needle}"):
        load_settings()
