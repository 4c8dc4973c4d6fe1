"""deploy/compose.yaml: the production topology in containers, and the failover contract of docs/SCALING.md.

The stack (a primary and a synchronous standby, PgBouncer in transaction mode, two gateways, two workers, two
schedulers, a one-shot migrate) comes up healthy. Signed GitHub webhooks go through both gateways to an HTTP
agent on the host while the primary's container is SIGKILLed and the standby promoted (and PgBouncer pointed
at it), as an operator would by the runbook: every event is sent until it gets a 2xx, as providers do. Then,
on the new primary, every 2xx names a stored delivery (the same one for every 2xx of an event), each with one
run, completed, whose task the agent answered: nothing answered 2xx is lost. The invariants are the bare-process
failover run's (tests/chaos/failover.py, tests/chaos/checks.py), reused.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import random
import secrets
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.chaos import checks
from tests.chaos.agents import HttpAgent
from tests.chaos.failover import LEASES, WebhookLoad
from tests.deploy.stack import Images, Stack
from tests.processes import free_port

# The first test of a session also builds the images (minutes on a loaded machine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROLES = ("gateway-1", "gateway-2", "worker-1", "worker-2", "scheduler-1", "scheduler-2")
PORTS = ("POSTGRES_PRIMARY_PORT", "POSTGRES_STANDBY_PORT", "PGBOUNCER_PORT", "GATEWAY_1_PORT", "GATEWAY_2_PORT",
         "WORKER_1_METRICS_PORT", "WORKER_2_METRICS_PORT", "SCHEDULER_1_METRICS_PORT", "SCHEDULER_2_METRICS_PORT")
GITHUB_SECRET = "deploy-failover-github-secret"
RATE = float(os.environ.get("HOOKGATE_TEST_DEPLOY_RATE", "20"))  # new events per second


class SignedLoad(WebhookLoad):
    """The failover run's load, as GitHub sends it: signed, the delivery id in X-GitHub-Delivery, over both gateways."""

    def __init__(self, urls: list[str], rate: float, rng: random.Random) -> None:
        super().__init__(urls[0], rate, rng)
        self.urls = urls
        self.sent = 0

    def _request(self, key: str) -> tuple[str, bytes, dict[str, str]]:
        self.sent += 1
        body = json.dumps({"action": "opened", "key": key}).encode()
        mac = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"content-type": "application/json", "x-github-event": "issues", "x-github-delivery": key,
                   "x-hub-signature-256": f"sha256={mac}"}
        return self.urls[self.sent % len(self.urls)], body, headers


def _stack(images: Images, directory: Path) -> Stack:
    ports = {name: str(free_port()) for name in PORTS}
    env = {**ports, "HOOKGATE_IMAGE": images.hookgate, "HOOKGATE_POSTGRES_IMAGE": images.postgres,
           "HOOKGATE_SECRET_KEY": base64.b64encode(os.urandom(32)).decode(),
           "POSTGRES_PASSWORD": secrets.token_hex(12), "HOOKGATE_DB_PASSWORD": secrets.token_hex(12),
           "REPLICATION_PASSWORD": secrets.token_hex(12), "HOOKGATE_AGENT_ALLOW_CIDRS": "127.0.0.0/8",
           "HOOKGATE_PUBLIC_URL": f"http://127.0.0.1:{ports['GATEWAY_1_PORT']}"}
    # Settings added the way an operator adds them, an override file: the failover run's short leases (work cut
    # off by the kill is taken over in seconds) and per-IP gates lifted (the whole load comes from one address).
    settings = {**LEASES, "HOOKGATE_LOG_LEVEL": "info"}
    override = directory / "compose.override.yaml"
    override.write_text(json.dumps({"services": {role: {"environment": settings} for role in ROLES}}))
    return Stack("compose.yaml", env, [override])


def _world(gateway: str, api_key: str, agent_url: str) -> tuple[str, str, str]:
    """An HTTP agent, an autopilot and a GitHub webhook trigger with its secret: (agent id, push secret, token)."""
    with httpx.Client(base_url=gateway, headers={"authorization": f"Bearer {api_key}"}, timeout=30) as client:
        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            return dict(client.post(path, json=body).raise_for_status().json())

        agent = post("/v1/agents", {"name": "deploy-agent", "max_concurrency": 64,
                                    "runtime": {"kind": "http", "url": agent_url, "timeout_s": 3}})
        autopilot = post("/v1/autopilots", {"title": "deploy failover", "instructions": "failover",
                                            "assignee": {"type": "agent", "id": agent["id"]},
                                            "execution_mode": "run_only"})
        trigger = post(f"/v1/autopilots/{autopilot['id']}/triggers",
                       {"kind": "webhook", "provider": "github", "rate_limit_per_minute": 1_000_000})
        client.put(f"/v1/triggers/{trigger['id']}/signing-secret", json={"secret": GITHUB_SECRET}).raise_for_status()
    return agent["id"], agent["signing_secret"], trigger["token"]


async def _every_2xx_reached_the_agent(conn: asyncpg.Connection, load: WebhookLoad, agent: HttpAgent) -> list[str]:
    """Each delivery answered 2xx has its run's task answered 2xx by the agent."""
    named = [d for ids in load.delivered.values() for d in ids]
    rows = await conn.fetch("""SELECT d.id::text AS delivery, t.id::text AS task, r.status FROM webhook_delivery d
                               LEFT JOIN autopilot_run r ON r.id = d.run_id LEFT JOIN agent_task t ON t.run_id = r.id
                               WHERE d.id::text = ANY($1)""", named)
    return [f"delivery {r['delivery']}: run {r['status']}, task {r['task']} not answered by the agent"
            for r in rows if r["task"] is None or r["task"] not in agent.acked or r["status"] != "completed"]


async def test_production_stack_fails_over_in_containers_without_losing_a_2xx(images: Images, tmp_path: Path) -> None:
    stack = _stack(images, tmp_path)
    env = stack.env
    gateways = [f"http://127.0.0.1:{env['GATEWAY_1_PORT']}", f"http://127.0.0.1:{env['GATEWAY_2_PORT']}"]
    agent = HttpAgent(misbehave=False)
    try:
        await asyncio.to_thread(stack.compose, "up", "-d", "--no-build")
        await asyncio.to_thread(stack.wait_healthy, ["postgres-primary", "postgres-standby", "pgbouncer", *ROLES], 300)
        assert "applied" in stack.logs("migrate")
        # Synchronous: the standby is named and streaming, and every role logged the durability it runs with.
        for role in ROLES:
            assert "durability: synchronous standby (FIRST 1 (standby1))" in stack.logs(role), stack.logs(role)[-2000:]
        boot = json.loads(await asyncio.to_thread(
            stack.exec, "gateway-1", "hookgate", "bootstrap", "--workspace", "deploy", "--json"))
        agent_url = await agent.start()
        agent_id, agent.secret, token = await asyncio.to_thread(_world, gateways[0], boot["api_key"], agent_url)
        load = SignedLoad([f"{g}/hooks/{token}" for g in gateways], RATE, random.Random(29))
        async with httpx.AsyncClient(timeout=15) as client:
            sender = asyncio.create_task(load.run(client))
            try:
                await asyncio.sleep(5)
                accepted_before = len(load.answered)
                killed = time.monotonic()
                await asyncio.to_thread(stack.compose, "kill", "-s", "SIGKILL", "postgres-primary")
                await asyncio.sleep(2)
                await asyncio.to_thread(stack.exec, "postgres-standby", "hookgate-postgres", "promote")
                promoted = time.monotonic()
                await asyncio.to_thread(stack.exec, "pgbouncer", "hookgate-postgres", "retarget", "127.0.0.1",
                                        env["POSTGRES_STANDBY_PORT"])
                retargeted = time.monotonic()
                await asyncio.sleep(10)
            finally:
                load.stopping = True
                await sender
            await load.settle(120)
        # The old primary stayed down (its restart policy does not bring back a container an operator killed).
        assert stack.health("postgres-primary") == "exited"
        new_primary = (f"postgresql://hookgate:{env['HOOKGATE_DB_PASSWORD']}@127.0.0.1:"
                       f"{env['POSTGRES_STANDBY_PORT']}/hookgate")
        conn = await asyncpg.connect(new_primary)
        try:
            assert not await conn.fetchval("SELECT pg_is_in_recovery()")
            await checks.wait_quiescent(conn, 120, 0.5)
            violations = [*await checks.every_2xx_stored(conn, load), *await checks.one_run_per_delivery(conn),
                          *await checks.runs_terminal(conn), *await checks.runs_not_failed(conn),
                          *await checks.pushes_acknowledged(conn, agent, agent_id),
                          *await _every_2xx_reached_the_agent(conn, load, agent)]
            stored = int(await conn.fetchval("SELECT count(*) FROM webhook_delivery"))
        finally:
            await conn.close()
        after = [answered for sent, answered in load.answered if sent >= promoted]
        figures = {"events": load.events, "statuses": dict(load.statuses), "2xx before the kill": accepted_before,
                   "2xx sent after the promotion": len(after), "deliveries stored": stored,
                   "kill -> promoted s": round(promoted - killed, 1),
                   "promoted -> PgBouncer retargeted s": round(retargeted - promoted, 1),
                   "retargeted -> first 2xx s": round(min(after, default=retargeted) - retargeted, 1)}
        assert not load.unanswered, figures
        assert not violations, (violations[:20], figures)
        assert accepted_before > 0 and after, figures  # traffic went through before the kill and after the promotion
        assert stored == len(load.delivered), figures  # nothing but the events sent, each once
        print(figures)
    finally:
        await agent.stop()
        await asyncio.to_thread(stack.down)
