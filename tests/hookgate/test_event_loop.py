"""``HOOKGATE_EVENT_LOOP``: the server roles run on uvloop by default and on the standard loop when asked."""

import asyncio

import pytest

from hookgate.cli import run_loop
from hookgate.settings import ConfigError, load_settings


def _loop_module(kind: str) -> str:
    seen: list[str] = []

    async def main() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)

    run_loop(kind, main())
    return seen[0]


def test_auto_and_uvloop_run_on_uvloop():
    assert _loop_module("auto").startswith("uvloop")
    assert _loop_module("uvloop").startswith("uvloop")


def test_asyncio_runs_on_the_standard_loop():
    assert _loop_module("asyncio").startswith("asyncio")


def test_the_setting_defaults_to_auto_and_refuses_other_loops(monkeypatch):
    monkeypatch.setenv("HOOKGATE_SECRET_KEY", "a" * 44)
    assert load_settings().event_loop == "auto"
    monkeypatch.setenv("HOOKGATE_EVENT_LOOP", "trio")
    with pytest.raises(ConfigError, match="HOOKGATE_EVENT_LOOP"):
        load_settings()
