"""Fairness across real processes (gateway + 2 workers + an agent process), short versions of bench/fairness.py.

(a) A trigger's 4,000 queued deliveries do not hold up another autopilot's trigger on the same agent: each of
    the quiet trigger's runs reaches the agent within a few seconds while thousands of the flood's wait.
(b) A workspace whose agent hangs (every push held 20 s, 64 slots full, more queued) does not starve another
    workspace's pushes: each arrives within 2 s while the hanging pushes are all held.
(b) runs after (a), with what is left of the flood still draining in its own workspace: a third tenant.
(c) A workspace of 10 agents the workers have never pushed to, all hanging (640 slots between them, more than
    the two workers' 512 push slots), holds no more than its part of each worker's slots (never the last
    eighth; beside what is left of (a)'s flood, half): B's pushes still arrive within 2 s while C holds it all.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from tests.conftest import TEST_SECRET_KEY
from tests.fairness.scenarios import Config, run

FLOOD = 4000


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_flood_does_not_hold_up_a_quiet_trigger_and_hanging_agents_do_not_starve_another_workspace(
        db_url: str, tmp_path: Path) -> None:
    cfg = Config(flood=FLOOD, quiet_rate=1.0, push_ms=20.0, concurrency=4, quiet_max=5,
                 hang_runs=200, hang_s=20.0, hang_concurrency=64, b_rate=20.0, hang_measure_s=8.0,
                 baseline_s=0.0, workers=2, many_agents=10, many_runs=60, many_concurrency=64)
    report = await run(db_url, TEST_SECRET_KEY, cfg, tmp_path)

    quiet = report.quiet_flood
    assert quiet.sent == 5 and quiet.lost == 0, quiet.figures()
    assert max(quiet.latencies_ms) < 3000, quiet.figures()
    # At each quiet receipt, thousands of the flood's pushes were still to come (the flood alone takes > 20 s).
    assert min(quiet.pressure) >= 2000, quiet.figures()

    b = report.b_hang
    assert report.hang_held == 64
    assert b.sent >= 150 and b.lost == 0, b.figures()
    assert max(b.latencies_ms) <= 2000, b.figures()
    # Every one of B's pushes arrived while the agent held all 64 of A's.
    assert min(b.pressure) == 64, b.figures()

    many = report.b_many
    assert many is not None
    # Each worker kept at least its headroom from C; with the flood's workspace still wanting, half its slots.
    assert 2 * 256 // 3 <= report.many_held <= 2 * (256 - 256 // 8), report.many_held
    assert many.sent >= 150 and many.lost == 0, many.figures()
    assert max(many.latencies_ms) <= 2000, many.figures()
    # B's pushes arrived while C held all it could (its pushes end together after 20 s and start again).
    assert statistics.median(many.pressure) == report.many_held, many.figures()
