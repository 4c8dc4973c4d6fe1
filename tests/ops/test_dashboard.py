"""The dashboard over ASGI: login, session cookie, CSRF, workspace scoping, escaping, every overview panel."""

import html
from datetime import UTC, datetime, timedelta

import httpx

from autopilot import admission, audit, workspaces
from gateway.app import create_app
from gateway.sessions import SESSION_COOKIE
from hookgate.context import Context, open_context
from sql import Q
from tests import factories
from tests.conftest import make_settings
from tests.ops.conftest import CSRF, Small, admit_runs, insert_delivery, log_in


async def test_pages_redirect_to_login_without_a_session(client):
    for path in ("/dashboard", "/dashboard/deliveries", "/dashboard/runs/00000000-0000-0000-0000-000000000000"):
        answer = await client.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == "/dashboard/login"


async def test_login_sets_a_signed_http_only_strict_cookie_without_the_key(client, small: Small):
    page = await client.get("/dashboard/login")
    csrf = CSRF.search(page.text).group(1)
    answer = await client.post("/dashboard/login", data={"api_key": small.world.api_key, "csrf": csrf})
    assert answer.status_code == 303
    cookie = next(v for k, v in answer.headers.multi_items() if k == "set-cookie" and v.startswith(SESSION_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/dashboard" in cookie
    assert "Secure" not in cookie
    assert small.world.api_key not in cookie and small.world.api_key[4:20] not in cookie
    assert (await client.get("/dashboard")).status_code == 200


async def test_cookie_is_secure_when_the_public_url_is_https(db_url, small: Small):
    async with open_context(make_settings(db_url, public_url="https://hooks.example"), migrate=False) as ctx:
        transport = httpx.ASGITransport(app=create_app(ctx))
        async with httpx.AsyncClient(transport=transport, base_url="https://hooks.example") as http:
            await log_in(http, small.world.api_key)
            cookie = http.cookies.jar
            assert all(c.secure for c in cookie if c.name == SESSION_COOKIE)


async def test_login_refuses_a_missing_csrf_token_and_a_wrong_key(client, small: Small):
    await client.get("/dashboard/login")
    no_csrf = await client.post("/dashboard/login", data={"api_key": small.world.api_key})
    assert no_csrf.status_code == 403 and SESSION_COOKIE not in no_csrf.headers.get("set-cookie", "")
    page = await client.get("/dashboard/login")
    bad_key = "hgk_" + "A" * 43
    wrong = await client.post("/dashboard/login", data={"api_key": bad_key, "csrf": CSRF.search(page.text).group(1)})
    assert wrong.status_code == 401 and "not valid" in wrong.text and bad_key not in wrong.text


async def test_posts_without_the_session_csrf_token_or_from_another_origin_are_refused(client, ctx, small: Small):
    csrf = await log_in(client, small.world.api_key)
    delivery = await insert_delivery(ctx, small)
    path = f"/dashboard/deliveries/{delivery}/replay"
    assert (await client.post(path, data={})).status_code == 403
    assert (await client.post(path, data={"csrf": "forged"})).status_code == 403
    foreign = await client.post(path, data={"csrf": csrf}, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert (await client.post("/dashboard/logout", data={"csrf": "forged"})).status_code == 403


async def test_logout_ends_the_session(client, small: Small):
    csrf = await log_in(client, small.world.api_key)
    answer = await client.post("/dashboard/logout", data={"csrf": csrf})
    assert answer.status_code == 303 and answer.headers["location"] == "/dashboard/login"
    assert (await client.get("/dashboard")).status_code == 303


async def test_a_tampered_cookie_or_a_revoked_key_ends_the_session(client, ctx: Context, small: Small):
    await log_in(client, small.world.api_key)
    good = client.cookies.get(SESSION_COOKIE, path="/dashboard")
    client.cookies.set(SESSION_COOKIE, good[:-2] + ("AA" if not good.endswith("AA") else "BB"), path="/dashboard")
    assert (await client.get("/dashboard")).status_code == 303
    client.cookies.set(SESSION_COOKIE, good, path="/dashboard")
    assert (await client.get("/dashboard")).status_code == 200
    async with ctx.pool.acquire() as conn:
        key = await workspaces.authenticate(conn, small.world.api_key)
        await conn.fetchrow(Q.api_key_revoke, small.world.workspace_id, key.key_id)
    assert (await client.get("/dashboard")).status_code == 303


async def test_overview_shows_every_panel_for_the_workspace(client, ctx: Context, small: Small):
    w = small.world
    runtime = await factories.pull_agent(w, name="night-runtime")
    async with ctx.pool.acquire() as conn:
        await conn.execute("INSERT INTO agent_instance (agent_id, instance) VALUES ($1, 'box-7')", runtime.row["id"])
        await audit.record(conn, "EXPIRE", actor_type="system", actor_id=None, subject_type="task",
                           subject_id="t1", workspace_id=w.workspace_id)
        paused = await factories.autopilot(w, small.agent.row["id"], title="paused-pilot")
        await conn.execute("UPDATE autopilot SET status = 'paused' WHERE id = $1", paused["id"])
        skipped = await admission.admit(conn, autopilot_id=paused["id"], source="api", payload={},
                                        heartbeat_timeout_s=120.0)
    run_ids = await admit_runs(ctx, small, 2)
    async with ctx.pool.acquire() as conn:
        await conn.execute("INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key) "
                           "VALUES ($1, $2, $3, 'k1')", w.workspace_id, run_ids[0], small.agent.row["id"])
    fire = datetime.now(UTC) + timedelta(hours=1)
    await factories.schedule_trigger(w, small.autopilot, "0 * * * *", fire, timezone="Europe/Paris")
    await insert_delivery(ctx, small)
    await insert_delivery(ctx, small, status="failed", reason_code="dispatch_exhausted")
    await log_in(client, w.api_key)
    page = (await client.get("/dashboard")).text
    assert "night-runtime" in page and "box-7" in page
    assert ">pending</td><td>2<" in page and ">skipped</td><td>1<" in page
    assert ">queued</td><td>1<" in page and ">failed</td><td>1<" in page
    assert "<strong>1</strong>" in page  # expired leases today
    assert skipped.reason_code in page and "dispatch_exhausted" in page
    assert "0 * * * *" in page and "Europe/Paris" in page
    assert f"/dashboard/runs/{skipped.run_id}" in page


async def test_everything_is_scoped_to_the_key_workspace(client, ctx: Context, small: Small):
    other = await factories.world(ctx, "other")
    other_agent = await factories.http_agent(other)
    other_pilot = await factories.autopilot(other, other_agent.row["id"], title="secret-project")
    other_trigger, _ = await factories.webhook_trigger(other, other_pilot)
    other_small = Small(other, other_agent, other_pilot, other_trigger, "")
    foreign_delivery = await insert_delivery(ctx, other_small, event="foreign.event")
    foreign_run = (await admit_runs(ctx, other_small, 1))[0]
    csrf = await log_in(client, small.world.api_key)
    for path in ("/dashboard", "/dashboard/deliveries"):
        page = (await client.get(path)).text
        assert "secret-project" not in page and "foreign.event" not in page
    assert (await client.get(f"/dashboard/runs/{foreign_run}")).status_code == 404
    replay = await client.post(f"/dashboard/deliveries/{foreign_delivery}/replay", data={"csrf": csrf})
    assert replay.status_code == 404


async def test_every_value_is_escaped(client, ctx: Context, small: Small):
    hostile = '<script>alert("x")</script>'
    pilot = await factories.autopilot(small.world, small.agent.row["id"], title=hostile)
    trigger, _ = await factories.webhook_trigger(small.world, pilot)
    await insert_delivery(ctx, Small(small.world, small.agent, pilot, trigger, ""), event=hostile)
    run_id = (await admit_runs(ctx, Small(small.world, small.agent, pilot, trigger, ""), 1))[0]
    await log_in(client, small.world.api_key)
    for path in ("/dashboard/deliveries", f"/dashboard/runs/{run_id}"):
        page = (await client.get(path)).text
        assert hostile not in page and html.escape(hostile, quote=False) in page.replace("&#34;", '"')


async def test_run_chain_shows_delivery_run_task_and_result(client, ctx: Context, small: Small):
    delivery = await insert_delivery(ctx, small, event="issue.opened")
    async with ctx.pool.acquire() as conn:
        admitted = await admission.admit(conn, autopilot_id=small.autopilot["id"], source="webhook", payload={},
                                         trigger_id=small.trigger["id"], delivery_id=delivery,
                                         heartbeat_timeout_s=120.0)
        await conn.execute(
            "INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key, status, result) "
            "VALUES ($1, $2, $3, 'k2', 'succeeded', '{\"answer\": 42}')",
            small.world.workspace_id, admitted.run_id, small.agent.row["id"])
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/runs/{admitted.run_id}")).text
    assert str(delivery) in page and "issue.opened" in page and "succeeded" in page and "\"answer\": 42" in page


async def test_pages_answer_503_with_retry_after_when_the_pool_is_exhausted(db_url, small: Small):
    import time

    settings = make_settings(db_url, pool_max_size=2, pool_acquire_timeout=0.3)
    async with open_context(settings, migrate=False) as ctx:
        transport = httpx.ASGITransport(app=create_app(ctx))
        async with httpx.AsyncClient(transport=transport, base_url="http://hooks.test") as http:
            await log_in(http, small.world.api_key)
            held = [await ctx.pool.acquire() for _ in range(2)]
            try:
                started = time.monotonic()
                answer = await http.get("/dashboard")
                assert time.monotonic() - started < 1.5
            finally:
                for conn in held:
                    await ctx.pool.release(conn)
            assert answer.status_code == 503 and answer.headers["retry-after"]
            assert answer.json()["error"] == "unavailable"
            assert (await http.get("/dashboard")).status_code == 200


async def test_replay_creates_a_new_delivery_audited_to_the_member(client, ctx: Context, small: Small):
    original = await insert_delivery(ctx, small, event="order.paid")
    csrf = await log_in(client, small.world.api_key)
    answer = await client.post(f"/dashboard/deliveries/{original}/replay", data={"csrf": csrf})
    assert answer.status_code == 303 and "replayed=" in answer.headers["location"]
    new_id = answer.headers["location"].split("replayed=")[1]
    async with ctx.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT replayed_from_delivery_id, event FROM webhook_delivery WHERE id = $1::uuid",
                                  new_id)
        audit_actor = await conn.fetchval("SELECT actor_id FROM audit_log WHERE action = 'REPLAY'")
    assert row["replayed_from_delivery_id"] == original and row["event"] == "order.paid"
    assert audit_actor == str(small.world.owner_id)
    page = (await client.get(answer.headers["location"])).text
    assert f"replay of <code>{original}</code>" in page


async def test_replay_is_refused_to_a_member_who_cannot_write_the_autopilot(client, ctx: Context, small: Small):
    original = await insert_delivery(ctx, small)
    async with ctx.pool.acquire() as conn:
        _, key = await workspaces.add_member(conn, small.world.workspace_id, "viewer", "member")
    csrf = await log_in(client, key)
    answer = await client.post(f"/dashboard/deliveries/{original}/replay", data={"csrf": csrf})
    assert answer.status_code == 403
    async with ctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM webhook_delivery") == 1


async def test_a_rejected_delivery_cannot_be_replayed(client, ctx: Context, small: Small):
    original = await insert_delivery(ctx, small, status="rejected", reason_code="invalid_signature")
    csrf = await log_in(client, small.world.api_key)
    answer = await client.post(f"/dashboard/deliveries/{original}/replay", data={"csrf": csrf})
    assert answer.status_code == 303 and answer.headers["location"].endswith("problem=rejected_delivery")
    assert "rejected_delivery" in (await client.get(answer.headers["location"])).text
