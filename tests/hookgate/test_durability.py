"""The durability line each process logs at start says what a 2xx survives, from the server's own settings."""

from __future__ import annotations

import logging

import pytest

from hookgate import durability
from hookgate.durability import Durability


@pytest.mark.parametrize(("found", "level", "line"), [
    (Durability("on", ""), logging.INFO, "durability: one server's disk (a failover can lose commits answered 2xx)"),
    (Durability("local", "standby1"), logging.INFO, "durability: one server's disk"),
    (Durability("off", "standby1", sync_standbys=("standby1",)), logging.WARNING,
     "durability: none past the last WAL flush (synchronous_commit=off)"),
    (Durability("on", "standby1", sync_standbys=("standby1",)), logging.INFO,
     "durability: synchronous standby (standby1), on the primary's disk and a standby's disk; in sync now: standby1"),
    (Durability("remote_apply", "ANY 1 (a, b)", sync_standbys=("a", "b")), logging.INFO,
     "durability: synchronous standby (ANY 1 (a, b)), on the primary's disk and a standby's disk; in sync now: a, b"),
    (Durability("remote_write", "standby1", sync_standbys=("standby1",)), logging.INFO,
     "durability: synchronous standby (standby1), on the primary's disk and a standby's memory"),
    (Durability("on", "standby1"), logging.WARNING,
     "durability: synchronous standby (standby1), on the primary's disk and a standby's disk; no synchronous "
     "standby attached: every commit waits until one is"),
    (Durability("on", "standby1", hidden=1), logging.INFO, "the standbys' state is not visible to this role"),
    (Durability("on", "", in_recovery=True), logging.WARNING, "durability: none, the server is a standby"),
])
def test_the_line_names_what_an_acknowledged_commit_survives(found, level, line):
    got_level, got = found.describe()
    assert got_level == level
    assert line in got


async def test_a_process_logs_the_durability_of_its_own_server_once(ctx, caplog):
    with caplog.at_level(logging.INFO, logger="hookgate.durability"):
        await durability.log_at_start(ctx.pool)
    [record] = [r for r in caplog.records if r.name == "hookgate.durability"]
    # The test servers (embedded 18, the machine's 15) run with the defaults and no standby.
    assert record.getMessage().startswith("durability: one server's disk")
    assert (record.synchronous_commit, record.synchronous_standby_names) == ("on", "")  # type: ignore[attr-defined]
