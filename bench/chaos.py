"""Chaos runs: prove that nothing is lost or doubled while processes crash and the database goes away.

One command (loopback only, bounded by ``--events`` / ``--rate``; embedded PostgreSQL in a temp dir by
default)::

    python bench/chaos.py [--events 2000] [--rate 40] [--server-url postgresql://…] [--seed N] [--agent-outage 18]
                          [--pooler]
    python bench/chaos.py --scenario failover [--async] [--rate 40] [--lead 18] [--stall 1] [--promote-after 1]
                          [--after 5]

``chaos`` (default): starts 2 gateways, 3 workers and 2 schedulers (real ``hookgate`` processes) behind a TCP
proxy to PostgreSQL, sends signed webhooks (github, stripe, standard, slack; ~20 % provider retries, ~3 %
forged), runs cron triggers every minute, an HTTP agent answering 500/429/slowly and pull runtimes that vanish
mid-lease, while SIGKILLing workers and schedulers, cutting connections and restarting PostgreSQL once. From
60 % of the load the HTTP agent is down for ``--agent-outage`` seconds (refusing connections, then answering
503), longer than its retry schedule survives: its circuit breaker must hold its tasks until it is back.

``failover``: a primary and a synchronous streaming standby (``--async``: asynchronous), a gateway, a worker
and a scheduler on the multi-host URL; mid-load the standby stops receiving WAL, ``--stall`` seconds later
the primary is SIGKILLed, and the standby is promoted ``--promote-after`` seconds after that
(tests/chaos/failover.py).

Prints a summary table; exits 1 on any violation. See docs/RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.chaos.failover import FailoverConfig, run_failover
from tests.chaos.run import Config, run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("chaos", "failover"), default="chaos")
    parser.add_argument("--events", type=int, default=2000, help="webhook requests to send (new + retries)")
    parser.add_argument("--rate", type=float, default=40.0, help="requests (failover: new events) per second")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--schedules", type=int, default=3, help="cron triggers '* * * * *'")
    parser.add_argument("--server-url", help="use this PostgreSQL server (no restart) instead of an embedded one")
    parser.add_argument("--no-postgres-restart", action="store_true")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--quiescence-timeout", type=float, default=300.0, help="seconds to wait for the backlog")
    parser.add_argument("--agent-outage", type=float, default=18.0, help="seconds the HTTP agent is down (0: never)")
    parser.add_argument("--agent-outage-at", type=float, default=0.6, help="share of the load after which it goes down")
    parser.add_argument("--pooler", action="store_true",
                        help="the roles' pools through a real PgBouncer in transaction mode (Debian's pgbouncer)")
    failover = parser.add_argument_group("failover")
    failover.add_argument("--async", dest="asynchronous", action="store_true",
                          help="asynchronous streaming replication (acknowledged commits can be lost)")
    failover.add_argument("--lead", type=float, default=18.0, help="seconds from the roles' start to the kill")
    failover.add_argument("--promote-after", type=float, default=1.0, help="seconds without a primary")
    failover.add_argument("--stall", type=float, default=1.0,
                          help="seconds the standby receives no WAL before the kill (0: it keeps up)")
    failover.add_argument("--after", type=float, default=5.0, help="seconds of load after the promotion")
    args = parser.parse_args()
    if args.scenario == "failover":
        result = run_failover(FailoverConfig(
            synchronous=not args.asynchronous, rate=args.rate, lead_s=args.lead, promote_after_s=args.promote_after,
            stall_s=args.stall, after_promote_s=args.after, seed=args.seed))
        print(result.details())
        return 0 if result.ok else 1
    config = Config(events=args.events, rate=args.rate, workers=args.workers, schedules=args.schedules,
                    server_url=args.server_url, restart_postgres=not args.no_postgres_restart, seed=args.seed,
                    quiescence_timeout_s=args.quiescence_timeout, agent_outage_s=args.agent_outage,
                    agent_outage_at=args.agent_outage_at, pooler=args.pooler)
    report = run_chaos(config)
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
