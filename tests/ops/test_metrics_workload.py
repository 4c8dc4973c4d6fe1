"""After a small real workload (webhooks, a cron fire, pushes to a real local agent) every family moves."""

import asyncio
import importlib.util
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer

import httpx
import pytest

from hookgate import crypto
from hookgate.context import Context
from tests import factories
from tests.ops.conftest import samples
from tests.servers import QuietHandler, serving_thread

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("gateway.ingress", "worker.deliveries", "scheduler.manager")),
    reason="needs the ingress, the workers and the scheduler on this branch",
)


class _Agent(QuietHandler):
    """An HTTP agent that finishes every task at once (200)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def agent_url() -> Iterator[str]:
    with serving_thread(ThreadingHTTPServer(("127.0.0.1", 0), _Agent)) as url:
        yield url + "/agent"


def _value(found: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in found.items() if n == name and all(dict(ls).get(k) == x for k, x in labels.items()))


async def test_a_small_workload_moves_every_metric_family(spawn, ctx: Context, agent_url: str):
    s = await factories.small(ctx, agent_url=agent_url, provider="github", rate_limit_per_minute=10_000)
    w, token = s.world, s.token
    await factories.schedule_trigger(w, s.autopilot, "* * * * *", datetime.now(UTC) - timedelta(seconds=1))
    serve = spawn.start("serve", gateway=True, extra_env={"HOOKGATE_IP_BAD_CREDENTIAL_CAP": "2"})
    await asyncio.to_thread(serve.wait_ready)
    async with httpx.AsyncClient(base_url=serve.url, timeout=10) as http:
        for n in range(5):
            answer = await http.post(f"/hooks/{token}", json={"action": "opened", "n": n},
                                     headers={"X-GitHub-Event": "issues", "X-GitHub-Delivery": f"d-{n}"})
            assert answer.status_code == 200, answer.text
        for _ in range(3):  # two unknown tokens are charged; the third request is refused by the debt gate
            await http.post(f"/hooks/{crypto.new_token('awt_')}", json={})
        wanted = {
            ("hookgate_ingress_requests_total", (("outcome", "accepted"), ("preset", "github"))): 5,
            ("hookgate_rate_gate_rejections_total", (("gate", "bad_credentials"),)): 1,
            ("hookgate_ingress_latency_seconds_count", (("outcome", "accepted"),)): 5,
        }
        deadline = time.monotonic() + 30
        while True:
            found = samples((await http.get("/metrics")).text)
            moved = {
                "ingress": all(found.get(k, 0) >= v for k, v in wanted.items()),
                "claims": _value(found, "hookgate_claims_total", queue="deliveries") >= 5,
                "completions": _value(found, "hookgate_completions_total", queue="deliveries") >= 5,
                "task claims": _value(found, "hookgate_claims_total", queue="tasks") >= 1,
                "pushes": _value(found, "hookgate_push_outcomes_total", agent=str(s.agent.row["id"])) >= 1,
                "plans": _value(found, "hookgate_scheduler_plans_total", outcome="claimed") >= 1,
                "fire lag": _value(found, "hookgate_scheduler_fire_lag_seconds_count") >= 1,
                "pool": _value(found, "hookgate_db_pool_connections", state="size") >= 1,
            }
            if all(moved.values()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    assert all(moved.values()), {k: v for k, v in moved.items() if not v}
