import asyncio
import time

import httpx

from hookgate import metrics
from hookgate.context import Context
from tests import factories
from tests.ops.conftest import Small, admit_runs, samples, scrape

FAMILIES = (
    "hookgate_ingress_requests", "hookgate_ingress_latency_seconds", "hookgate_ingress_batch_size",
    "hookgate_ingress_token_lookups", "hookgate_ingress_body_mismatch",
    "hookgate_rate_gate_rejections", "hookgate_http_connections_closed",
    "hookgate_claims", "hookgate_completions", "hookgate_retries", "hookgate_lease_expiries",
    "hookgate_push_outcomes", "hookgate_scheduler_plans", "hookgate_scheduler_fire_lag_seconds",
    "hookgate_queue_depth", "hookgate_queue_oldest_age_seconds", "hookgate_queue_stats_up",
    "hookgate_db_pool_connections",
)


async def test_metrics_endpoint_declares_every_metric_family_in_text_format(client: httpx.AsyncClient):
    answer = await client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    for name in FAMILIES:
        assert f"# TYPE {name} " in answer.text or f"# TYPE {name}_total counter" in answer.text, name


async def test_queue_depth_and_oldest_age_come_from_the_database(client, ctx: Context, small: Small):
    await admit_runs(ctx, small, 3)
    await ctx.pool.execute("UPDATE autopilot_run SET created_at = now() - interval '90 seconds'")
    found = await scrape(client)
    runs = (("agent", ""), ("queue", "runs_pending"))
    assert found[("hookgate_queue_depth", runs)] == 3
    assert 89 <= found[("hookgate_queue_oldest_age_seconds", runs)] < 200
    assert found[("hookgate_queue_depth", (("agent", ""), ("queue", "deliveries")))] == 0
    assert found[("hookgate_queue_stats_up", ())] == 1


async def test_queued_deliveries_are_counted_and_the_oldest_aged_by_receipt(client, ctx: Context, small: Small):
    await factories.delivery(ctx.pool, small.trigger, received_at=await ctx.pool.fetchval(
        "SELECT now() - interval '90 seconds'"))
    await factories.delivery(ctx.pool, small.trigger)
    await factories.delivery(ctx.pool, small.trigger, status="dispatched")
    found = await scrape(client)
    deliveries = (("agent", ""), ("queue", "deliveries"))
    assert found[("hookgate_queue_depth", deliveries)] == 2
    assert 89 <= found[("hookgate_queue_oldest_age_seconds", deliveries)] < 200


async def test_queued_tasks_are_counted_per_agent(client, ctx: Context, small: Small):
    run_ids = await admit_runs(ctx, small, 2)
    async with ctx.pool.acquire() as conn:
        for run_id in run_ids:
            await conn.execute(
                "INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key) VALUES ($1, $2, $3, $4)",
                small.world.workspace_id, run_id, small.agent.row["id"], f"run:{run_id}:1",
            )
    found = await scrape(client)
    assert found[("hookgate_queue_depth", (("agent", str(small.agent.row["id"])), ("queue", "tasks")))] == 2


async def test_pool_usage_counts_connections_in_use(client, ctx: Context):
    async with ctx.pool.acquire(), ctx.pool.acquire():
        found = await scrape(client)
    assert found[("hookgate_db_pool_connections", (("state", "max"),))] == ctx.settings.pool_max_size
    # Two held by the test; the scrape itself holds none at exposition time.
    assert found[("hookgate_db_pool_connections", (("state", "in_use"),))] >= 2
    size = found[("hookgate_db_pool_connections", (("state", "size"),))]
    free = found[("hookgate_db_pool_connections", (("state", "free"),))]
    assert size == free + found[("hookgate_db_pool_connections", (("state", "in_use"),))]


async def test_queue_statistics_are_cached_between_scrapes(ctx: Context, small: Small):
    stats = metrics.QueueStats(ctx.pool, ttl=60)
    await stats.refresh()
    await admit_runs(ctx, small, 1)
    await stats.refresh()
    assert [r.depth for r in stats.rows if r.queue == "runs_pending"] == [0]
    stats.fetched_at = float("-inf")
    await stats.refresh()
    assert [r.depth for r in stats.rows if r.queue == "runs_pending"] == [1]


async def test_a_scrape_of_a_saturated_pool_answers_quickly_with_stale_queue_values(ctx: Context, small: Small):
    stats = metrics.QueueStats(ctx.pool, ttl=0, timeout=0.2)
    await admit_runs(ctx, small, 1)
    await stats.refresh()
    errors_before = metrics.REGISTRY.get_sample_value("hookgate_queue_stats_errors_total") or 0
    held = [await ctx.pool.acquire() for _ in range(ctx.settings.pool_max_size)]
    try:
        started = time.monotonic()
        text = (await metrics.render(ctx.pool, stats)).decode()
        assert time.monotonic() - started < 1.0
    finally:
        for conn in held:
            await ctx.pool.release(conn)
    found = samples(text)
    assert found[("hookgate_queue_stats_up", ())] == 0
    assert found[("hookgate_queue_depth", (("agent", ""), ("queue", "runs_pending")))] == 1
    assert metrics.REGISTRY.get_sample_value("hookgate_queue_stats_errors_total") == errors_before + 1


async def test_concurrent_scrapes_share_one_database_read(ctx: Context):
    stats = metrics.QueueStats(ctx.pool, ttl=60)
    reads = 0
    original = stats._read

    async def counting() -> list[metrics.QueueRow]:
        nonlocal reads
        reads += 1
        return await original()

    stats._read = counting  # type: ignore[method-assign]
    await asyncio.gather(*(stats.refresh() for _ in range(20)))
    assert reads == 1


async def test_hook_requests_are_counted_by_outcome_with_latency(client):
    def value(name: str, **labels: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    before = value("hookgate_ingress_requests_total", outcome="not_found", preset="unknown")
    observed = value("hookgate_ingress_latency_seconds_count", outcome="not_found")
    answer = await client.post("/hooks/awt_" + "x" * 43, json={"a": 1})
    assert answer.status_code == 404
    assert value("hookgate_ingress_requests_total", outcome="not_found", preset="unknown") == before + 1
    assert value("hookgate_ingress_latency_seconds_count", outcome="not_found") == observed + 1


def test_worker_processes_serve_metrics_on_their_own_port(spawn):
    from tests.processes import free_port

    port = free_port()
    proc = spawn.start("worker", extra_env={"HOOKGATE_METRICS_PORT": str(port)})
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1)
            break
        except httpx.HTTPError:
            assert proc.popen.poll() is None, proc.output()
            assert time.monotonic() < deadline, proc.output()
            time.sleep(0.05)
    assert answer.status_code == 200
    assert "hookgate_db_pool_connections" in answer.text
    # The same port answers the probes a container health check or an orchestrator asks.
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json() == {"status": "ok"}
    assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json() == {"status": "ready"}


def test_outcome_helpers_split_retries_from_completions_and_clamp_negative_lag():
    from datetime import UTC, datetime, timedelta

    def value(name: str, **labels: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    done = value("hookgate_completions_total", queue="probe", outcome="dispatched")
    retried = value("hookgate_retries_total", queue="probe")
    metrics.count_outcomes("probe", ["dispatched", "retry", "dispatched"])
    assert value("hookgate_completions_total", queue="probe", outcome="dispatched") == done + 2
    assert value("hookgate_retries_total", queue="probe") == retried + 1
    now = datetime.now(UTC)
    plans = [(now, now - timedelta(seconds=3)), (now, now + timedelta(seconds=0.3))]  # claimed early, late
    metrics.scheduler_started("probe", plans)
    assert value("hookgate_scheduler_fire_lag_seconds_count", job="probe") == 2
    assert value("hookgate_scheduler_fire_lag_seconds_sum", job="probe") == 0.3


async def test_ingress_counts_accepted_by_preset_and_rate_gate_refusals_by_gate(db_url, small: Small):
    from hookgate.context import open_context
    from tests.conftest import asgi_client, make_settings

    def value(name: str, **labels: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    accepted = value("hookgate_ingress_requests_total", outcome="accepted", preset="generic")
    refused = value("hookgate_rate_gate_rejections_total", gate="bad_credentials")
    capped = value("hookgate_rate_gate_rejections_total", gate="ip_cap")
    settings = make_settings(db_url, ip_bad_credential_cap=1, ip_request_cap=6)
    async with open_context(settings, migrate=False) as ctx:
        async with asgi_client(ctx, "198.51.100.4") as http:
            for n in range(3):
                assert (await http.post(f"/hooks/{small.token}", json={"n": n})).status_code == 200
            assert (await http.post("/hooks/awt_" + "x" * 43, json={})).status_code == 404
            assert (await http.post("/hooks/awt_" + "x" * 43, json={})).status_code == 429
        async with asgi_client(ctx, "198.51.100.5") as http:
            statuses = [(await http.post(f"/hooks/{small.token}", json={"m": n})).status_code for n in range(7)]
    assert statuses[-1] == 429
    assert value("hookgate_ingress_requests_total", outcome="accepted", preset="generic") >= accepted + 3
    assert value("hookgate_rate_gate_rejections_total", gate="bad_credentials") == refused + 1
    assert value("hookgate_rate_gate_rejections_total", gate="ip_cap") == capped + 1
