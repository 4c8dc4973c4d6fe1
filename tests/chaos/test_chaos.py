"""The CI-sized chaos run: about 80 s of signed webhooks and cron firings while processes are killed.

Also, from 60 % of the load, the HTTP agent is down for 18 s (refusing connections for 9 s, then answering
503): longer than the chaos retry schedule (about 13 s) and far more than 5 failed pushes in a row.

A shorter run does the same through a real PgBouncer in transaction mode (no agent outage: that is not the
pooler's business), PostgreSQL restarted once behind it, faults twice as often.
"""

from __future__ import annotations

import pytest

from tests.chaos.run import Config, run_chaos


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_nothing_lost_or_doubled_while_processes_crash_postgres_restarts_and_the_agent_is_down() -> None:
    # 3000 requests at 40/s: the load spans at least one minute boundary, so the cron triggers fire.
    report = run_chaos(Config(events=3000, rate=40.0, agent_outage_s=18.0, agent_outage_at=0.6))
    print(report.table())
    assert report.ok, report.table()
    figures = report.figures
    assert figures["lost"] == 0 and figures["doubled"] == 0
    assert figures["duplicates caught"] > 0 and figures["401 (forged)"] > 0
    assert figures["schedule_runs"] >= 3  # three cron triggers fired at least once each
    assert figures["postgres restarts"].startswith("1 ")
    assert figures["runtimes vanished"] > 0 and report.recoveries
    # The agent outage: every run completed all the same, each HTTP task answered 2xx by the agent.
    assert figures["runs_failed"] == 0 and figures["runs_completed"] == figures["runs"]
    outage = report.outage
    assert outage is not None and outage.down_at is not None and outage.back_at is not None
    tripped, recovered = outage.tripped(), outage.recovered()
    assert tripped is not None and recovered is not None  # unhealthy during the outage, healthy after it
    assert outage.down_at < tripped.since < outage.back_at <= recovered.since
    assert outage.drained_s is not None  # the backlog made before the return drained
    assert outage.attempts.get(("unreachable", False), 0) >= 1  # the refused pushes that tripped it
    assert any(outcome == "failed" for outcome, _ in outage.attempts)  # the 503s
    # While the circuit was open only probes went out: one per interval (0.5 s doubling to 2 s) over ~18 s.
    assert 1 <= outage.probes <= 20


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nothing_lost_or_doubled_through_pgbouncer_while_processes_crash_and_postgres_restarts() -> None:
    # 500 requests at 40/s: 12.5 s of load, PostgreSQL restarted at 5 s, a fault every 1-3 s.
    report = run_chaos(Config(events=500, rate=40.0, fault_interval=(1.0, 3.0), agent_outage_s=0,
                              pooler=True))
    print(report.table())
    assert report.ok, report.table()
    figures = report.figures
    assert figures["lost"] == 0 and figures["doubled"] == 0
    assert figures["duplicates caught"] > 0 and figures["401 (forged)"] > 0
    assert figures["postgres restarts"].startswith("1 ")
    assert figures["runs_failed"] == 0
