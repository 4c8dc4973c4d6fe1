"""Fairness benchmark: one tenant's flood or hanging agents against another tenant's latency, beside baselines.

One command (PostgreSQL server URL in ``HOOKGATE_BENCH_SERVER_URL``, default the local trust-auth server; a
scratch database is created and dropped)::

    python bench/fairness.py [--flood 10000] [--hang-runs 1000] [--hang-s 30] [--measure-s 40] [--baseline-s 10]
                             [--many-agents 10] [--many-runs 100]

Real processes: one ``hookgate gateway``, ``--workers`` (2) ``hookgate worker`` processes with default dispatch
settings, and the agents in a separate process (``bench/agent.py``). Three scenarios in one run, each measured
against an unloaded baseline (the same POSTs for ``--baseline-s`` seconds, nothing else queued):

(a) ``--flood`` deliveries of a noisy trigger, inserted at once as ingress stores them (delivery + admitted
    run, one commit, NOTIFY; as ``bench/dispatch.py``'s drain), and one webhook every ``1/--quiet-rate`` s
    POSTed through the gateway to a quiet trigger (another autopilot of the same workspace), both to one agent
    (``--concurrency`` slots, each push held ``--push-ms`` at the agent), until the flood has reached the agent:
    the quiet runs' POST -> agent receipt latency, during the flood and unloaded.
(b) workspace A's agent holds every push ``--hang-s`` seconds (``--hang-concurrency`` slots, timeout above the
    hold) with ``--hang-runs`` runs queued, while workspace B POSTs ``--b-rate`` webhooks a second for
    ``--measure-s`` seconds to its own fast agent: B's POST -> agent latency, during the hang and unloaded.
(c) many new agents in one workspace: once (b)'s runs are cancelled, workspace C's ``--many-agents`` agents,
    never pushed to before, hold every push ``--hang-s`` seconds (``--many-concurrency`` slots each: together
    more than every worker's push slots) with ``--many-runs`` runs queued each, while B POSTs as in (b): B's
    POST -> agent latency (against (b)'s unloaded baseline).

Targets, each printed PASS or FAIL: under load the p99 ≤ 2 s and the p50 ≤ 3× the unloaded p50 (a POST whose
push never arrived counts as infinitely slow). Exits 1 if a target is missed. The scenario code is shared with
the slow test ``tests/fairness/test_fairness.py`` (``tests/fairness/scenarios.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import databases
from tests.fairness.scenarios import Config, Phase, Report, run, targets

KEY = base64.b64encode(b"f" * 32).decode()
DB = f"hookgate_bench_fairness_{os.getpid()}"  # its own scratch database: two benches can run side by side


def _bench_line(subject: str, loaded: Phase, base: Phase) -> str:
    """A ``BENCH {json}`` line for ``bench/run_all``."""
    ratio = loaded.p50() / base.p50() if base.p50() and math.isfinite(loaded.p50()) else None
    return "BENCH " + json.dumps({"subject": subject, "value": len(loaded.latencies_ms), "unit": "samples",
                                  "p50_ms": round(loaded.p50(), 2), "p99_ms": round(loaded.p99(), 2),
                                  "baseline": round(base.p50(), 2), "ratio": ratio and round(ratio, 2)})


def _print(report: Report, cfg: Config) -> bool:
    print(json.dumps({
        "a_flood": cfg.flood, "a_concurrency": cfg.concurrency, "a_push_ms": cfg.push_ms,
        "a_flood_reached_agent_s": round(report.flood_s, 2), "a_flood_done": report.flood_done,
        "a_quiet_unloaded": report.quiet_base.figures(),
        "a_quiet_during_flood": report.quiet_flood.figures() | {"note": "pressure = flood pushes still to come"},
        "b_hang_runs": cfg.hang_runs, "b_hang_s": cfg.hang_s, "b_a_pushes_held_at_start": report.hang_held,
        "b_rate_per_s": cfg.b_rate,
        "b_unloaded": report.b_base.figures(),
        "b_during_hang": report.b_hang.figures() | {"note": "pressure = A's pushes held at the agent"},
        "c_many_agents": cfg.many_agents, "c_runs_per_agent": cfg.many_runs,
        "c_concurrency_per_agent": cfg.many_concurrency, "c_pushes_held_at_start": report.many_held,
        "b_during_c_many_agents": None if report.b_many is None else
        report.b_many.figures() | {"note": "pressure = C's pushes held at the agent"},
    }, indent=2))
    print(_bench_line("quiet trigger during flood", report.quiet_flood, report.quiet_base))
    print(_bench_line("workspace B during A's hang", report.b_hang, report.b_base))
    if report.b_many is not None:
        print(_bench_line("workspace B during C's many new agents", report.b_many, report.b_base))
    checks = targets(report)
    for target in checks:
        print(target.line())
    return all(t.ok for t in checks)


async def main(args: argparse.Namespace) -> int:
    server = os.environ.get("HOOKGATE_BENCH_SERVER_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    cfg = Config(flood=args.flood, quiet_rate=args.quiet_rate, push_ms=args.push_ms, concurrency=args.concurrency,
                 hang_runs=args.hang_runs, hang_s=args.hang_s, hang_concurrency=args.hang_concurrency,
                 b_rate=args.b_rate, hang_measure_s=args.measure_s, baseline_s=args.baseline_s,
                 workers=args.workers, many_agents=args.many_agents, many_runs=args.many_runs,
                 many_concurrency=args.many_concurrency)
    url = await databases.create(server, DB, migrated=True)
    try:
        with tempfile.TemporaryDirectory(prefix="hookgate-fairness-") as logs:
            try:
                report = await run(url, KEY, cfg, Path(logs))
            except BaseException:
                for log in sorted(Path(logs).iterdir()):  # what the processes said, before the logs go
                    print(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}", file=sys.stderr)
                raise
    finally:
        await databases.drop(server, DB)
    return 0 if _print(report, cfg) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", type=int, default=10_000, help="(a) noisy deliveries inserted at once")
    parser.add_argument("--quiet-rate", type=float, default=1.0, help="(a) quiet POSTs per second")
    parser.add_argument("--push-ms", type=float, default=5.0, help="(a) and B's agent: ms each push takes")
    parser.add_argument("--concurrency", type=int, default=4, help="(a) and B's agent: max_concurrency")
    parser.add_argument("--hang-runs", type=int, default=1_000, help="(b) runs queued for A's hanging agent")
    parser.add_argument("--hang-s", type=float, default=30.0, help="(b) seconds A's agent holds each push")
    parser.add_argument("--hang-concurrency", type=int, default=64, help="(b) A's agent max_concurrency")
    parser.add_argument("--b-rate", type=float, default=20.0, help="(b) B's POSTs per second")
    parser.add_argument("--measure-s", type=float, default=40.0, help="(b), (c) seconds B POSTs during the load")
    parser.add_argument("--many-agents", type=int, default=10, help="(c) C's new hanging agents (0: skip (c))")
    parser.add_argument("--many-runs", type=int, default=100, help="(c) runs queued for each of C's agents")
    parser.add_argument("--many-concurrency", type=int, default=64, help="(c) each of C's agents' max_concurrency")
    parser.add_argument("--baseline-s", type=float, default=10.0, help="seconds of each unloaded baseline")
    parser.add_argument("--workers", type=int, default=2, help="hookgate worker processes")
    raise SystemExit(asyncio.run(main(parser.parse_args())))
