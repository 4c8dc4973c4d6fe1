"""The CI-sized chaos run: about 80 s of signed webhooks and cron firings while processes are killed."""

from __future__ import annotations

import pytest

from tests.chaos.run import Config, run_chaos


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_nothing_lost_or_doubled_while_processes_crash_and_postgres_restarts() -> None:
    # 3000 requests at 40/s: the load spans at least one minute boundary, so the cron triggers fire.
    report = run_chaos(Config(events=3000, rate=40.0))
    print(report.table())
    assert report.ok, report.table()
    figures = report.figures
    assert figures["lost"] == 0 and figures["doubled"] == 0
    assert figures["duplicates caught"] > 0 and figures["401 (forged)"] > 0
    assert figures["schedule_runs"] >= 3  # three cron triggers fired at least once each
    assert figures["postgres restarts"].startswith("1 ")
    assert figures["runtimes vanished"] > 0 and report.recoveries
