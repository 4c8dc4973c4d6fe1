"""The dashboard over ASGI: login, session, every page and filter, confirmations, writes through the admin API."""

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from autopilot import admission, audit, dispatch, tasks, workspaces
from gateway.app import create_app
from gateway.sessions import SESSION_COOKIE
from hookgate.context import Context, open_context
from sql import Q
from tests import factories, pushes
from tests.conftest import asgi_client, make_settings
from tests.ops.conftest import CSRF, Small, admit_runs, insert_delivery, log_in


async def store_delivery(ctx: Context, small: Small, **values: Any) -> Any:
    """A delivery row with the columns a delivery page shows (headers, body, dedupe key, counts, time)."""
    row = {"event": "push", "status": "queued", "signature_status": "not_required", "reason_code": None,
           "headers": {}, "body": b"{}", "dedupe_key": None, "attempt_count": 1, "body_mismatch_count": 0,
           "received_at": datetime.now(UTC), "replayed_from": None, "trigger": small.trigger, "run_id": None} | values
    trigger, replayed_from = row.pop("trigger"), row.pop("replayed_from")
    return await factories.delivery(
        ctx.pool, trigger, **row, content_type="application/json", provider="github",
        envelope={"event": row["event"], "payload": {}}, replayed_from_delivery_id=replayed_from,
        dedupe_source=None if row["dedupe_key"] is None else "header:x-github-delivery")


def ids_on(page: str, kind: str) -> list[str]:
    """The ids a page links to, in order (``/dashboard/<kind>/<id>``)."""
    return re.findall(rf'href="/dashboard/{kind}/([0-9a-f-]{{36}})"', page)


def rows_of(page: str) -> list[str]:
    """The delivery ids listed in the deliveries table, in order."""
    return re.findall(r'data-delivery="([0-9a-f-]{36})"', page)


async def confirm_post(client: httpx.AsyncClient, path: str, csrf: str, **fields: str) -> httpx.Response:
    """POST a dashboard form as the confirmation page does (``confirmed=yes``)."""
    return await client.post(path, data={"csrf": csrf, "confirmed": "yes", **fields})


async def test_root_leads_a_browser_to_the_dashboard(client):
    answer = await client.get("/")
    assert answer.status_code == 303 and answer.headers["location"] == "/dashboard"


async def test_pages_redirect_to_login_without_a_session(client):
    zero = "00000000-0000-0000-0000-000000000000"
    for path in ("/dashboard", "/dashboard/deliveries", f"/dashboard/runs/{zero}", f"/dashboard/deliveries/{zero}",
                 "/dashboard/agents", f"/dashboard/agents/{zero}", "/dashboard/autopilots",
                 f"/dashboard/autopilots/{zero}"):
        answer = await client.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == "/dashboard/login", path


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
    await ctx.pool.execute("INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key) "
                           "VALUES ($1, $2, $3, 'k1')", w.workspace_id, run_ids[0], small.agent.row["id"])
    fire = datetime.now(UTC) + timedelta(hours=1)
    await factories.schedule_trigger(w, small.autopilot, "0 * * * *", fire, timezone="Europe/Paris")
    await insert_delivery(ctx, small)
    failed = await insert_delivery(ctx, small, status="failed", reason_code="dispatch_exhausted")
    await log_in(client, w.api_key)
    page = (await client.get("/dashboard")).text
    assert "night-runtime" in page and "box-7" in page
    assert ">pending</td><td>2<" in page and ">skipped</td><td>1<" in page
    assert ">queued</a></td><td>1<" in page and ">failed</a></td><td>1<" in page
    assert "<strong>1</strong>" in page  # expired leases today
    assert skipped.reason_code in page and "dispatch_exhausted" in page
    assert "0 * * * *" in page and "Europe/Paris" in page
    assert f"/dashboard/runs/{skipped.run_id}" in page and f"/dashboard/deliveries/{failed}" in page
    assert f"/dashboard/agents/{runtime.row['id']}" in page and f"/dashboard/autopilots/{paused['id']}" in page


async def test_overview_charts_are_inline_svg_of_deliveries_by_outcome_and_push_latency(client, ctx: Context,
                                                                                        small: Small):
    await insert_delivery(ctx, small, status="failed", reason_code="dispatch_exhausted")
    for _ in range(3):
        await insert_delivery(ctx, small, status="dispatched")
    run_id = (await admit_runs(ctx, small, 1))[0]
    await ctx.pool.execute(
        "INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key, status, started_at, finished_at)"
        " VALUES ($1, $2, $3, 'lat', 'succeeded', now() - interval '2.5 seconds', now())",
        small.world.workspace_id, run_id, small.agent.row["id"])
    await log_in(client, small.world.api_key)
    page = (await client.get("/dashboard")).text
    deliveries = page[page.index('id="chart-deliveries"'):page.index('id="chart-latency"')]
    latency = page[page.index('id="chart-latency"'):page.index("</figure>", page.index('id="chart-latency"'))]
    assert "<svg" in deliveries and "<script" not in page and "http" not in deliveries.split("<svg")[1].split(">")[0]
    assert "dispatched: 0.30/min" in deliveries and "failed: 0.10/min" in deliveries  # 3 and 1 in a 10-minute bucket
    assert "<polyline" in latency and "p50 2.500 s (1 pushes)" in latency and "p99 2.500 s" in latency
    assert "no data" not in latency


async def test_overview_charts_say_when_there_is_no_data(client, small: Small):
    await log_in(client, small.world.api_key)
    page = (await client.get("/dashboard")).text
    assert page.count("no data in the last 24 hours") == 2


async def test_times_are_relative_with_the_exact_utc_time_on_hover(client, ctx: Context, small: Small):
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    delivery = await store_delivery(ctx, small, received_at=at)
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/deliveries/{delivery}")).text
    assert re.search(r'<time datetime="2026-01-02T03:04:05\+00:00" title="2026-01-02 03:04:05 UTC">\d+ (d|h|min|s) '
                     r"ago</time>", page)


async def test_everything_is_scoped_to_the_key_workspace(client, ctx: Context, small: Small):
    other = await factories.small(ctx, "other", title="secret-project")
    await insert_delivery(ctx, other, event="foreign.event")
    csrf = await log_in(client, small.world.api_key)
    for path in ("/dashboard", "/dashboard/deliveries", "/dashboard/agents", "/dashboard/autopilots",
                 f"/dashboard/deliveries?autopilot_id={other.autopilot['id']}"):
        page = (await client.get(path)).text
        assert "secret-project" not in page and "foreign.event" not in page
    assert (await client.post("/dashboard/logout", data={"csrf": csrf})).status_code == 303


async def test_every_value_is_escaped(client, ctx: Context, small: Small):
    hostile = '<script>alert("x")</script>'
    pilot = await factories.autopilot(small.world, small.agent.row["id"], title=hostile)
    trigger, _ = await factories.webhook_trigger(small.world, pilot, event_filters=[hostile])
    hostile_small = Small(small.world, small.agent, pilot, trigger, "")
    delivery = await store_delivery(ctx, hostile_small, event=hostile, headers={"user-agent": hostile},
                                    body=hostile.encode(), dedupe_key=hostile)
    run_id = (await admit_runs(ctx, hostile_small, 1))[0]
    await factories.http_agent(small.world, name=hostile)
    await log_in(client, small.world.api_key)
    for path in ("/dashboard/deliveries", f"/dashboard/runs/{run_id}", f"/dashboard/deliveries/{delivery}",
                 "/dashboard/autopilots", f"/dashboard/autopilots/{pilot['id']}", "/dashboard/agents"):
        page = (await client.get(path)).text
        assert hostile not in page and html.escape(hostile, quote=False) in page.replace("&#34;", '"'), path


async def test_deliveries_filter_by_trigger_autopilot_status_event_dedupe_key_and_time(client, ctx: Context,
                                                                                        small: Small):
    w = small.world
    other_pilot = await factories.autopilot(w, small.agent.row["id"], title="billing")
    other_trigger, _ = await factories.webhook_trigger(w, other_pilot)
    now = datetime.now(UTC)
    old = await store_delivery(ctx, small, event="issues.opened", received_at=now - timedelta(days=2))
    failed = await store_delivery(ctx, small, event="issues.closed", status="failed", reason_code="dispatch_exhausted")
    keyed = await store_delivery(ctx, small, event="push", dedupe_key="gh-delivery-42")
    billing = await store_delivery(ctx, small, event="invoice.paid", trigger=other_trigger)
    await log_in(client, w.api_key)

    async def search(**params: str) -> set[str]:
        answer = await client.get("/dashboard/deliveries", params=params)
        assert answer.status_code == 200, answer.text
        return set(rows_of(answer.text))

    everything = {str(old), str(failed), str(keyed), str(billing)}
    assert await search() == everything
    assert await search(trigger_id=str(other_trigger["id"])) == {str(billing)}
    assert await search(autopilot_id=str(small.autopilot["id"])) == everything - {str(billing)}
    assert await search(status="failed") == {str(failed)}
    assert await search(event="issues.*") == {str(old), str(failed)}
    assert await search(event="ISSUES.CLOSED") == {str(failed)}
    assert await search(event="issues") == set()  # no glob: the whole name
    assert await search(event="%") == set()  # LIKE's own wildcards are literal
    assert await search(dedupe_key="gh-delivery-42") == {str(keyed)}
    since = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert await search(since=since) == everything - {str(old)}
    assert await search(until=since) == {str(old)}
    page = (await client.get("/dashboard/deliveries", params={"status": "failed", "event": "issues.*"})).text
    assert '<option value="failed" selected>' in page and 'value="issues.*"' in page


async def test_bad_filter_values_answer_400_pages_not_errors(client, small: Small):
    await log_in(client, small.world.api_key)
    for params in ({"status": "exploded"}, {"trigger_id": "not-a-uuid"}, {"since": "yesterday"},
                   {"cursor": "!!!"}, {"cursor": "bm90LWEtdXVpZA"}, {"event": "x" * 300}):
        answer = await client.get("/dashboard/deliveries", params=params)
        assert answer.status_code == 400 and "text/html" in answer.headers["content-type"], params


async def test_deliveries_page_beyond_the_first_page_with_a_cursor(client, ctx: Context, small: Small):
    made = [str(await insert_delivery(ctx, small, event="order.paid")) for _ in range(53)]
    await insert_delivery(ctx, small, event="other")
    await log_in(client, small.world.api_key)
    first = (await client.get("/dashboard/deliveries", params={"event": "order.*"})).text
    newest_first = sorted(made, reverse=True)  # the list's order: by id (uuid7), newest first
    assert rows_of(first) == newest_first[:50]
    older = html.unescape(re.search(r'id="next-page" href="([^"]+)"', first).group(1))
    assert "event=order.%2A" in older or "event=order.*" in older
    second = (await client.get(older)).text
    assert rows_of(second) == newest_first[50:] and 'id="next-page"' not in second
    assert "← Newest" in second


async def test_delivery_page_shows_what_happened_to_the_webhook(client, ctx: Context, small: Small):
    # Signature headers are stored as ``True`` (gateway.providers.selected_headers), never their value.
    headers = {"x-hub-signature-256": True, "user-agent": "GitHub-Hookshot/1",
               "x-github-event": "issues"}
    rejected = await store_delivery(ctx, small, status="rejected", signature_status="invalid",
                                    reason_code="invalid_signature", headers=headers,
                                    body=b'{"action":"opened","issue":{"number":7}}', attempt_count=3,
                                    body_mismatch_count=1, dedupe_key="d-1")
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/deliveries/{rejected}")).text
    assert "x-hub-signature-256" in page and "present (signature values are never stored)" in page
    assert "GitHub-Hookshot/1" in page
    assert '"issue": {\n    "number": 7\n  }' in html.unescape(page)  # pretty-printed
    assert "invalid_signature" in page and "a proxy that rewrote the body" in page  # the PROVIDERS.md hint
    assert 'id="attempts">3<' in page and 'id="mismatches">1<' in page and "d-1" in page
    assert "Replay…" not in page  # a rejected delivery cannot be replayed


async def test_delivery_page_says_plainly_whether_the_signature_verified_and_which_header_it_checked(
        client, ctx: Context, small: Small):
    missing = await store_delivery(ctx, small, status="rejected", signature_status="missing",
                                   reason_code="missing_signature", headers={"x-github-event": "push"})
    unsigned = await store_delivery(ctx, small, headers={"x-github-event": "push"})
    await log_in(client, small.world.api_key)
    page = html.unescape((await client.get(f"/dashboard/deliveries/{missing}")).text)
    assert "The signature did not verify: the request has no X-Hub-Signature-256 header" in page
    assert "<code>X-Hub-Signature-256</code>" in page and "absent from the request" in page
    assert "X-Hub-Signature</code>" not in page  # GitHub's legacy SHA-1 header is never checked
    page = html.unescape((await client.get(f"/dashboard/deliveries/{unsigned}")).text)
    assert "No signature was checked: this trigger has no signing secret" in page
    assert "did not verify" not in page


async def test_delivery_page_links_its_run_its_replays_and_its_original(client, ctx: Context, small: Small):
    original = await store_delivery(ctx, small, event="order.paid", body=b'{"id": 1}')
    async with ctx.pool.acquire() as conn:
        admitted = await admission.admit(conn, autopilot_id=small.autopilot["id"], source="webhook", payload={},
                                         trigger_id=small.trigger["id"], delivery_id=original,
                                         heartbeat_timeout_s=120.0)
        await conn.execute("UPDATE webhook_delivery SET run_id = $2 WHERE id = $1", original, admitted.run_id)
    replay = await store_delivery(ctx, small, event="order.paid", replayed_from=original)
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/deliveries/{original}")).text
    assert str(admitted.run_id) in ids_on(page, "runs") and str(replay) in ids_on(page, "deliveries")
    assert "Replay…" in page
    replay_page = (await client.get(f"/dashboard/deliveries/{replay}")).text
    assert str(original) in ids_on(replay_page, "deliveries") and "replay of" in replay_page


async def test_replay_asks_first_then_creates_a_new_delivery_audited_to_the_member(client, ctx: Context,
                                                                                   small: Small):
    original = await insert_delivery(ctx, small, event="order.paid")
    csrf = await log_in(client, small.world.api_key)
    path = f"/dashboard/deliveries/{original}/replay"
    asked = await client.post(path, data={"csrf": csrf})
    assert asked.status_code == 200 and 'name="confirmed" value="yes"' in asked.text
    assert f'action="{path}"' in asked.text
    assert await ctx.pool.fetchval("SELECT count(*) FROM webhook_delivery") == 1
    answer = await confirm_post(client, path, csrf)
    assert answer.status_code == 303 and answer.headers["location"].endswith("?replayed=1")
    new_id = answer.headers["location"].split("/")[-1].split("?")[0]
    async with ctx.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT replayed_from_delivery_id, event FROM webhook_delivery WHERE id = $1::uuid",
                                  new_id)
        audit_actor = await conn.fetchval("SELECT actor_id FROM audit_log WHERE action = 'REPLAY'")
    assert row["replayed_from_delivery_id"] == original and row["event"] == "order.paid"
    assert audit_actor == str(small.world.owner_id)
    page = (await client.get(answer.headers["location"])).text
    assert 'id="replayed"' in page and str(original) in ids_on(page, "deliveries")


async def test_a_rejected_delivery_cannot_be_replayed(client, ctx: Context, small: Small):
    original = await insert_delivery(ctx, small, status="rejected", reason_code="invalid_signature")
    csrf = await log_in(client, small.world.api_key)
    answer = await confirm_post(client, f"/dashboard/deliveries/{original}/replay", csrf)
    assert answer.status_code == 409 and "cannot be replayed" in answer.text


async def test_run_page_shows_the_timeline_with_every_task_attempt_lease_and_error(client, ctx: Context,
                                                                                   small: Small):
    delivery = await insert_delivery(ctx, small, event="issue.opened")
    async with ctx.pool.acquire() as conn:
        admitted = await admission.admit(conn, autopilot_id=small.autopilot["id"], source="webhook", payload={},
                                         trigger_id=small.trigger["id"], delivery_id=delivery,
                                         heartbeat_timeout_s=120.0)
        await conn.execute(
            "INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key, status, attempt, error,"
            " finished_at) VALUES ($1, $2, $3, 'k1', 'failed', 5, 'agent answered 502', now())",
            small.world.workspace_id, admitted.run_id, small.agent.row["id"])
        await conn.execute(
            "INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key, status, attempt, lease_token,"
            " lease_expires_at, holder_instance, started_at) VALUES ($1, $2, $3, 'k2', 'running', 1,"
            " gen_random_uuid(), now() + interval '30 seconds', 'push-7', now())",
            small.world.workspace_id, admitted.run_id, small.agent.row["id"])
        lease = await conn.fetchval("SELECT lease_token FROM agent_task WHERE idempotency_key = 'k2'")
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/runs/{admitted.run_id}")).text
    assert str(delivery) in ids_on(page, "deliveries") and "issue.opened" in page
    assert "agent answered 502" in page and "5 of 5" in page
    assert "held by <code>push-7</code> until <time" in page and str(lease) not in page
    assert f"/dashboard/agents/{small.agent.row['id']}" in page
    assert "Cancel run…" in page and "Retry…" not in page  # a pending run is not retried


async def test_cancel_asks_first_then_cancels_through_the_admin_api(client, ctx: Context, small: Small):
    run_id = (await admit_runs(ctx, small, 1))[0]
    csrf = await log_in(client, small.world.api_key)
    path = f"/dashboard/runs/{run_id}/cancel"
    asked = await client.post(path, data={"csrf": csrf})
    assert asked.status_code == 200 and "Cancel this run?" in asked.text
    answer = await confirm_post(client, path, csrf)
    assert answer.status_code == 303
    async with ctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "cancelled"
        actor = await conn.fetchval("SELECT actor_id FROM audit_log WHERE action = 'RUN_CANCEL'")
    assert actor == str(small.world.owner_id)
    page = (await client.get(answer.headers["location"])).text
    assert 'id="cancelled"' in page and "Cancel run…" not in page
    again = await confirm_post(client, path, csrf)
    assert again.status_code == 409


async def test_run_page_lists_every_attempt_and_a_writer_retries_the_failed_run(client, ctx: Context, small: Small):
    async with pushes.failing_agent() as url:
        run_id = await pushes.failed_run(ctx, small.autopilot["id"], small.agent.row["id"], url)
    csrf = await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/runs/{run_id}")).text
    attempts = page[page.index('id="attempts"'):].split("</section>")[0]
    rows = re.findall(r'<tr data-attempt="[^"]+">(.*?)</tr>', attempts, re.S)
    assert len(rows) == 2 and all(">failed<" in r and ">502<" in r and " ms<" in r for r in rows)
    assert [re.search(r'class="attempt-no">(\d+)<', r).group(1) for r in rows] == ["1", "2"]
    assert all(re.search(r'<time datetime="[^"]+" title="[^"]+ UTC">', r) for r in rows)
    assert all("agent answered 502" in r for r in rows)
    assert "<details>" in attempts and "upstream down" in attempts  # the agent's answer, for writers
    assert "Retry…" in page and 'id="next-attempt"' not in page

    path = f"/dashboard/runs/{run_id}/retry"
    asked = await client.post(path, data={"csrf": csrf})
    assert asked.status_code == 200 and "Retry this run?" in asked.text and f'action="{path}"' in asked.text
    assert await ctx.pool.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 1
    answer = await confirm_post(client, path, csrf)
    assert answer.status_code == 303 and answer.headers["location"] == f"/dashboard/runs/{run_id}?retried=1"
    async with ctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "queued"
        assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 2
        actor = await conn.fetchval("SELECT actor_id FROM audit_log WHERE action = 'RETRY'")
    assert actor == str(small.world.owner_id)
    again = (await client.get(answer.headers["location"])).text
    assert 'id="retried"' in again and 'id="run-status">queued<' in again and "Retry…" not in again
    assert len(re.findall(r'<tr data-attempt=', again)) == 2  # the first task's attempts stay on the timeline
    refused = await confirm_post(client, path, csrf)
    assert refused.status_code == 409 and "only a failed or cancelled run" in refused.text


async def test_a_member_sees_the_attempts_without_the_agents_answer_and_no_retry(client, ctx: Context,
                                                                                 small: Small):
    async with pushes.failing_agent() as url:
        run_id = await pushes.failed_run(ctx, small.autopilot["id"], small.agent.row["id"], url)
    async with ctx.pool.acquire() as conn:
        _, key = await workspaces.add_member(conn, small.world.workspace_id, "viewer", "member")
    csrf = await log_in(client, key)
    page = (await client.get(f"/dashboard/runs/{run_id}")).text
    attempts = page[page.index('id="attempts"'):].split("</section>")[0]
    assert len(re.findall(r'<tr data-attempt=', attempts)) == 2 and "agent answered 502" in attempts
    assert "upstream down" not in page and "<details>" not in attempts
    assert "Retry…" not in page and "Cancel run…" not in page
    refused = await confirm_post(client, f"/dashboard/runs/{run_id}/retry", csrf)
    assert refused.status_code == 403
    assert await ctx.pool.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "failed"


async def test_a_tasks_result_is_on_its_run_and_task_pages_for_writers_only(client, ctx: Context, small: Small):
    answer = {"reply": "the agent's private reply"}
    async with ctx.pool.acquire() as conn:
        run_id = await factories.dispatched_run(conn, small.autopilot["id"])
        [won] = await tasks.claim(conn, agent_id=small.agent.row["id"], lease_s=600, holder="w", actor_type="worker")
        await tasks.report(conn, won.id, won.lease_token, tasks.Report("succeeded", answer), actor_type="agent",
                           actor_id=str(small.agent.row["id"]))
        _, key = await workspaces.add_member(conn, small.world.workspace_id, "viewer", "member")
    pages = (f"/dashboard/runs/{run_id}", f"/dashboard/tasks/{won.id}")
    await log_in(client, small.world.api_key)
    for path in pages:
        assert "the agent&#39;s private reply" in (await client.get(path)).text, path
    client.cookies.clear()
    await log_in(client, key)
    for path in pages:
        page = await client.get(path)
        assert page.status_code == 200 and "private reply" not in page.text, path
        assert "shown to the autopilot's writers only" in html.unescape(page.text), path


async def test_every_id_on_the_run_timeline_links_to_its_page_and_issue_and_task_pages_say_what_they_are(
        client, ctx: Context, small: Small):
    pilot = await factories.autopilot(small.world, small.agent.row["id"], mode="create_issue", title="triage issues")
    async with ctx.pool.acquire() as conn:
        run_id = await factories.dispatched_run(conn, pilot["id"])
        issue_id = await conn.fetchval("SELECT id FROM issue WHERE run_id = $1", run_id)
        task_id = await conn.fetchval("SELECT id FROM agent_task WHERE run_id = $1", run_id)
    assert issue_id and task_id
    await log_in(client, small.world.api_key)
    run = (await client.get(f"/dashboard/runs/{run_id}")).text
    assert ids_on(run, "issues") == [str(issue_id)] and ids_on(run, "tasks") == [str(task_id)]

    issue = await client.get(f"/dashboard/issues/{issue_id}")
    assert issue.status_code == 200, issue.text
    assert re.search(r'id="issue-status">(todo|in_progress)<', issue.text)
    assert ids_on(issue.text, "runs") == [str(run_id)] and ids_on(issue.text, "tasks") == [str(task_id)]
    assert str(small.agent.row["id"]) in ids_on(issue.text, "agents") and "triage issues" in issue.text
    assert "created <time" in issue.text and "updated <time" in issue.text

    task = await client.get(f"/dashboard/tasks/{task_id}")
    assert task.status_code == 200, task.text
    assert 'id="task-status">queued<' in task.text and "0 of " in task.text
    assert ids_on(task.text, "runs") == [str(run_id)] and ids_on(task.text, "issues") == [str(issue_id)]
    assert ids_on(task.text, "agents") == [str(small.agent.row["id"])] and "triage issues" in task.text
    assert "created <time" in task.text and "None yet." in task.text


async def test_task_page_lists_its_attempts_with_the_agents_answer_for_writers_only(client, ctx: Context,
                                                                                    small: Small):
    async with pushes.failing_agent() as url:
        run_id = await pushes.failed_run(ctx, small.autopilot["id"], small.agent.row["id"], url)
    async with ctx.pool.acquire() as conn:
        task_id = await conn.fetchval("SELECT id FROM agent_task WHERE run_id = $1", run_id)
        _, key = await workspaces.add_member(conn, small.world.workspace_id, "viewer", "member")
    await log_in(client, small.world.api_key)
    run = (await client.get(f"/dashboard/runs/{run_id}")).text
    assert ids_on(run, "tasks") == [str(task_id)]
    page = (await client.get(f"/dashboard/tasks/{task_id}")).text
    attempts = page[page.index('id="attempts"'):].split("</section>")[0]
    rows = re.findall(r'<tr data-attempt="[^"]+">(.*?)</tr>', attempts, re.S)
    assert len(rows) == 2 and all(">failed<" in r and ">502<" in r and "agent answered 502" in r for r in rows)
    assert 'id="task-status">failed<' in page and "<details>" in attempts and "upstream down" in attempts
    client.cookies.clear()
    await log_in(client, key)
    page = (await client.get(f"/dashboard/tasks/{task_id}")).text
    attempts = page[page.index('id="attempts"'):].split("</section>")[0]
    assert len(re.findall(r"<tr data-attempt=", attempts)) == 2 and "upstream down" not in page
    assert "shown to the autopilot's writers only" in attempts


async def test_a_run_waiting_for_its_next_attempt_says_when(client, ctx: Context, small: Small):
    run_id = (await admit_runs(ctx, small, 1))[0]
    async with ctx.pool.acquire() as conn:
        await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
        await conn.execute("UPDATE agent_task SET attempt = 1, error = 'agent answered 503',"
                           " available_at = now() + interval '10 minutes' WHERE run_id = $1", run_id)
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/runs/{run_id}")).text
    assert 'id="run-status">queued<' in page
    assert re.search(r'id="next-attempt">next attempt <time datetime="[^"]+" title="[^"]+ UTC">in (9|10) min</time>',
                     page)
    assert "Retry…" not in page


async def test_agents_show_their_health_and_retry_schedule(client, ctx: Context, small: Small):
    w = small.world
    sick = await factories.http_agent(w, name="sick-agent")
    async with ctx.pool.acquire() as conn:
        await conn.execute("UPDATE agent SET retry_schedule = '{5,60,3600}' WHERE id = $1", sick.row["id"])
        await conn.execute(
            "INSERT INTO agent_health (agent_id, state, since, failures, last_error, next_probe_at, probe_interval_s,"
            " probe_max_s) VALUES ($1, 'unhealthy', now() - interval '2 hours', 5, 'agent answered 502',"
            " now() + interval '30 minutes', 60, 3600)", sick.row["id"])
    await log_in(client, w.api_key)
    page = (await client.get("/dashboard/agents")).text
    row = lambda agent_id: page[page.index(f'data-agent="{agent_id}"'):].split("</tr>")[0]  # noqa: E731
    ill = row(sick.row["id"])
    assert 'class="error health">unhealthy</span>' in ill and "since <time" in ill and ">2 h ago</time>" in ill
    assert "next probe <time" in ill and ">in 29 min</time>" in ill and "agent answered 502" in ill
    assert "5s,1m,1h" in ill
    fine = row(small.agent.row["id"])
    assert 'class="ok health">healthy</span>' in fine and "default: 5s,1m,5m,30m,2h,5h,10h,10h (9 attempts)" in fine
    detail = (await client.get(f"/dashboard/agents/{sick.row['id']}")).text
    health = detail[detail.index('id="health"'):].split("</section>")[0]
    assert 'id="circuit">' in health and ">unhealthy<" in health and "agent answered 502" in health
    assert "next probe <time" in health and "5 consecutive failures" in health
    assert 'id="retry-schedule">5s,1m,1h (4 attempts)' in health


async def test_agents_page_shows_health_queue_in_flight_and_last_error(client, ctx: Context, small: Small):
    w = small.world
    online = await factories.pull_agent(w, name="online-runtime")
    offline = await factories.pull_agent(w, name="offline-runtime")
    run_ids = await admit_runs(ctx, small, 3)
    async with ctx.pool.acquire() as conn:
        await conn.execute("INSERT INTO agent_instance (agent_id, instance) VALUES ($1, 'box-1')", online.row["id"])
        await conn.execute("INSERT INTO agent_instance (agent_id, instance, heartbeat_at) VALUES ($1, 'box-2',"
                           " now() - interval '1 hour')", offline.row["id"])
        for i, (status, error) in enumerate((("queued", None), ("running", None), ("failed", "connect refused"))):
            await conn.execute(
                "INSERT INTO agent_task (workspace_id, run_id, agent_id, idempotency_key, status, error, lease_token,"
                " lease_expires_at, finished_at) VALUES ($1, $2, $3, $4, $5, $6,"
                " CASE WHEN $5 = 'running' THEN gen_random_uuid() END,"
                " CASE WHEN $5 = 'running' THEN now() + interval '1 minute' END, now())",
                w.workspace_id, run_ids[i], small.agent.row["id"], f"h{i}", status, error)
        # The failed task's attempt, as the push worker records it (the agent page lists failed attempts).
        await conn.execute(
            "INSERT INTO task_attempt (workspace_id, task_id, run_id, agent_id, attempt, started_at, finished_at,"
            " duration_ms, outcome, error) SELECT workspace_id, id, run_id, agent_id, 1, now(), now(), 3,"
            " 'unreachable', error FROM agent_task WHERE idempotency_key = 'h2'")
    await log_in(client, w.api_key)
    page = (await client.get("/dashboard/agents")).text
    row = lambda agent_id: page[page.index(f'data-agent="{agent_id}"'):].split("</tr>")[0]  # noqa: E731
    assert "online (1)" in row(online.row["id"]) and "offline" in row(offline.row["id"])
    http = row(small.agent.row["id"])
    assert "<td>1</td><td>1</td>" in http and "connect refused" in http
    detail = (await client.get(f"/dashboard/agents/{small.agent.row['id']}")).text
    assert 'id="queued">1<' in detail and 'id="in-flight">1 of' in detail and "connect refused" in detail
    assert "box-2" in (await client.get(f"/dashboard/agents/{offline.row['id']}")).text


async def test_agent_edit_asks_first_and_patches_only_the_changed_fields(client, ctx: Context, small: Small):
    agent_id = small.agent.row["id"]
    csrf = await log_in(client, small.world.api_key)
    path = f"/dashboard/agents/{agent_id}/edit"
    form = {"name": "agent", "url": "http://127.0.0.1:9/v2", "timeout_s": "10.0", "max_concurrency": "8"}
    asked = await client.post(path, data={"csrf": csrf, **form})
    assert asked.status_code == 200 and "http://127.0.0.1:9/v2" in asked.text and "max_concurrency" in asked.text
    assert "<th>timeout_s</th>" not in asked.text and "<th>url</th>" in asked.text  # unchanged: not sent
    answer = await confirm_post(client, path, csrf, **form)
    assert answer.status_code == 303 and answer.headers["location"].endswith("?saved=1")
    async with ctx.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT endpoint_url, max_concurrency, timeout_s FROM agent WHERE id = $1", agent_id)
        detail = await conn.fetchval("SELECT detail FROM audit_log WHERE action = 'AGENT_UPDATE'")
    assert row["endpoint_url"] == "http://127.0.0.1:9/v2" and row["max_concurrency"] == 8 and row["timeout_s"] == 10
    assert detail["changed"] == ["max_concurrency", "url"]


async def test_agent_edit_refusals_are_the_admin_apis(client, ctx: Context, small: Small):
    csrf = await log_in(client, small.world.api_key)
    path = f"/dashboard/agents/{small.agent.row['id']}/edit"
    too_many = await confirm_post(client, path, csrf, max_concurrency="0")
    assert too_many.status_code == 422 and "max_concurrency" in too_many.text
    forbidden = await confirm_post(client, path, csrf, url="http://169.254.169.254/latest")
    assert forbidden.status_code == 422
    nothing = await confirm_post(client, path, csrf, name="agent")
    assert nothing.status_code == 400
    pull = await factories.pull_agent(small.world)
    on_pull = await confirm_post(client, f"/dashboard/agents/{pull.row['id']}/edit", csrf, timeout_s="3")
    assert on_pull.status_code == 422 and "pull agent" in on_pull.text


async def test_rotating_an_agent_secret_shows_the_new_secret_once(client, ctx: Context, small: Small):
    agent_id = small.agent.row["id"]
    csrf = await log_in(client, small.world.api_key)
    path = f"/dashboard/agents/{agent_id}/rotate-secret"
    assert "Rotate the signing secret" in (await client.post(path, data={"csrf": csrf})).text
    answer = await confirm_post(client, path, csrf)
    secret = re.search(r'id="secret-value" readonly value="(whsec_[^"]+)"', answer.text).group(1)
    assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
    detail = (await client.get(f"/dashboard/agents/{agent_id}")).text
    assert secret not in detail and f"…{secret[-4:]}" in detail
    assert await ctx.pool.fetchval("SELECT count(*) FROM audit_log WHERE action = 'AGENT_SECRET_ROTATE'") == 1


async def test_autopilot_page_shows_the_webhook_url_to_writers_and_next_cron_fires(client, ctx: Context,
                                                                                   small: Small):
    fire = datetime.now(UTC) + timedelta(hours=1)
    schedule = await factories.schedule_trigger(small.world, small.autopilot, "0 9 * * *", fire,
                                                timezone="Europe/Berlin")
    await log_in(client, small.world.api_key)
    listing = (await client.get("/dashboard/autopilots")).text
    assert str(small.autopilot["id"]) in ids_on(listing, "autopilots")
    page = (await client.get(f"/dashboard/autopilots/{small.autopilot['id']}")).text
    assert f"http://hooks.test/hooks/{small.token}" in page
    fires = page[page.index(f'data-trigger="{schedule["id"]}"'):].split("</table>")[0]
    assert fires.count("<time datetime=") == 3 and fires.count("T09:00:00+0") == 3  # 09:00 Berlin time, 3 times
    assert "Pause…" in page and "Rotate token…" in page and "Save filters…" in page


async def test_rotating_a_token_shows_the_new_url_and_the_old_one_stops(client, ctx: Context, small: Small):
    csrf = await log_in(client, small.world.api_key)
    path = f"/dashboard/triggers/{small.trigger['id']}/rotate-token"
    assert "Rotate this webhook" in (await client.post(path, data={"csrf": csrf})).text
    answer = await confirm_post(client, path, csrf)
    url = re.search(r'id="secret-value" readonly value="([^"]+)"', answer.text).group(1)
    assert url.startswith("http://hooks.test/hooks/") and small.token not in url
    assert answer.headers["cache-control"] == "no-store"  # the new URL is the credential, shown once
    assert await ctx.pool.fetchval("SELECT count(*) FROM audit_log WHERE action = 'TOKEN_ROTATE'") == 1
    assert (await client.post(f"/hooks/{small.token}", json={})).status_code == 404


async def test_pause_and_resume_an_autopilot(client, ctx: Context, small: Small):
    csrf = await log_in(client, small.world.api_key)
    base = f"/dashboard/autopilots/{small.autopilot['id']}"
    assert "Pause autopilot" in (await client.post(f"{base}/pause", data={"csrf": csrf})).text
    assert (await confirm_post(client, f"{base}/pause", csrf)).status_code == 303
    page = (await client.get(base)).text
    assert 'id="autopilot-status">paused<' in page and "Resume…" in page
    assert (await confirm_post(client, f"{base}/resume", csrf)).status_code == 303
    assert 'id="autopilot-status">active<' in (await client.get(base)).text
    assert (await confirm_post(client, f"{base}/archive", csrf)).status_code == 404  # not offered here


async def test_trigger_event_filters_and_enabling_through_the_admin_patch(client, ctx: Context, small: Small):
    before = await ctx.pool.fetchval("SELECT count(*) FROM autopilot_rule_version WHERE autopilot_id = $1",
                                     small.autopilot["id"])
    csrf = await log_in(client, small.world.api_key)
    path = f"/dashboard/triggers/{small.trigger['id']}/edit"
    asked = await client.post(path, data={"csrf": csrf, "event_filters": "issues.*\npush, "})
    assert asked.status_code == 200 and "issues.*, push" in asked.text
    assert (await confirm_post(client, path, csrf, event_filters="issues.*\npush, ")).status_code == 303
    assert (await confirm_post(client, path, csrf, enabled="false")).status_code == 303
    async with ctx.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT event_filters, enabled FROM autopilot_trigger WHERE id = $1",
                                  small.trigger["id"])
        versions = await conn.fetchval("SELECT count(*) FROM autopilot_rule_version WHERE autopilot_id = $1",
                                       small.autopilot["id"])
    assert row["event_filters"] == ["issues.*", "push"] and row["enabled"] is False and versions == before + 2
    page = (await client.get(f"/dashboard/autopilots/{small.autopilot['id']}")).text
    assert "Enable…" in page and "<code>issues.*</code>" in page


async def test_pages_answer_503_with_retry_after_when_the_pool_is_exhausted(db_url, small: Small):
    import time

    settings = make_settings(db_url, pool_max_size=2, pool_acquire_timeout=0.3)
    async with open_context(settings, migrate=False) as ctx:
        async with asgi_client(ctx) as http:
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


async def _agent_unhealthy_with_a_due_task(ctx: Context, small: Small) -> tuple[Any, Any, datetime]:
    """A run whose task waited out its own backoff (due a minute ago) while its agent's circuit is open.

    Returns ``(run id, task id, the agent's next probe)``.
    """
    async with ctx.pool.acquire() as conn:
        run_id = await factories.dispatched_run(conn, small.autopilot["id"])
        task_id = await conn.fetchval("UPDATE agent_task SET attempt = 1, error = 'agent answered 503',"
                                      " available_at = now() - interval '1 minute' WHERE run_id = $1 RETURNING id",
                                      run_id)
        probe = await conn.fetchval(
            "INSERT INTO agent_health (agent_id, state, since, failures, last_error, next_probe_at, probe_interval_s,"
            " probe_max_s) VALUES ($1, 'unhealthy', now() - interval '5 minutes', 5, 'agent answered 503',"
            " now() + interval '20 minutes', 600, 3600) RETURNING next_probe_at", small.agent.row["id"])
    return run_id, task_id, probe


async def test_a_due_task_of_an_unhealthy_agent_waits_for_the_agent_on_the_run_and_task_pages(
        client, ctx: Context, small: Small):
    run_id, task_id, probe = await _agent_unhealthy_with_a_due_task(ctx, small)
    await log_in(client, small.world.api_key)
    probe_time = f'<time datetime="{probe.isoformat()}"'
    run = (await client.get(f"/dashboard/runs/{run_id}")).text
    assert re.search(r'id="next-attempt">waiting for the agent to recover \(next probe <time datetime="[^"]+" '
                     r'title="[^"]+ UTC">in (19|20) min</time>\)', run), run
    task_row = run[run.index(f'data-task="{task_id}"'):].split("</table>")[0]
    assert "waiting for the agent to recover (next probe " + probe_time in task_row and "next try" not in task_row
    task = (await client.get(f"/dashboard/tasks/{task_id}")).text
    attempt = task[task.index("<th>Attempt</th>"):].split("</tr>")[0]
    assert "waiting for the agent to recover (next probe " + probe_time in attempt and "next try" not in attempt


async def test_a_dispatched_delivery_counts_the_dispatch_attempt_that_made_its_run(client, ctx: Context,
                                                                                    small: Small):
    from worker.deliveries import DeliveryWorker

    posted = await client.post(f"/hooks/{small.token}", json={"event": "order.paid"})
    assert posted.status_code == 200, posted.text
    delivery_id = posted.json()["delivery_id"]
    assert await DeliveryWorker(ctx, holder="dashboard-test").run_once() == 1
    await ctx.pool.execute("UPDATE autopilot_run SET status = 'completed', finished_at = now() WHERE id ="
                           " (SELECT run_id FROM webhook_delivery WHERE id = $1)", delivery_id)
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/deliveries/{delivery_id}")).text
    assert 'id="delivery-status">dispatched<' in page and ">completed<" in page
    assert 'id="dispatch-attempts">1 dispatch attempt (it made the run)<' in page, page
    # Two failed dispatches before the one that made the run: 3.
    await ctx.pool.execute("UPDATE webhook_delivery SET dispatch_attempts = 2 WHERE id = $1", delivery_id)
    page = (await client.get(f"/dashboard/deliveries/{delivery_id}")).text
    assert 'id="dispatch-attempts">3 dispatch attempts (the last made the run)<' in page
    queued = await insert_delivery(ctx, small)
    page = (await client.get(f"/dashboard/deliveries/{queued}")).text
    assert 'id="dispatch-attempts">none yet<' in page


async def test_the_agent_page_keeps_its_recent_errors_after_later_successes(client, ctx: Context, small: Small):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from autopilot import agents
    from tests.servers import serving_app

    answered = []

    async def flaky(_request):  # the first push of each task fails, the second succeeds
        answered.append(1)
        return JSONResponse({"error": "warming up"} if len(answered) % 2 else {"ok": True},
                            status_code=503 if len(answered) % 2 else 200)

    async with serving_app(Starlette(routes=[Route("/agent", flaky, methods=["POST"])])) as base:
        async with ctx.pool.acquire() as conn:
            await agents.update_agent(conn, small.agent.row["id"],
                                      agents.AgentChange(url=f"{base}/agent", retry_schedule=[0.05]))
            run_id = await factories.dispatched_run(conn, small.autopilot["id"])
        await pushes.push_until(ctx, run_id, "completed")
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/agents/{small.agent.row['id']}")).text
    errors = page[page.index('id="errors"'):].split("</section>")[0]
    rows = re.findall(r"<tr data-attempt=.*?</tr>", errors, re.S)
    assert len(rows) == 1 and "agent answered 503" in rows[0] and ">503<" in rows[0], errors
    assert f"/dashboard/runs/{run_id}" in rows[0] and "No errors." not in errors


async def test_the_autopilot_page_shows_the_instructions_and_the_assignee_by_name(client, ctx: Context,
                                                                                 small: Small):
    from autopilot import agents

    pilot = await factories.autopilot(small.world, small.agent.row["id"], title="triage <bugs>",
                                      instructions="Label each issue.\nClose <dupes>.")
    async with ctx.pool.acquire() as conn:
        squad = await agents.create_squad(conn, workspace_id=small.world.workspace_id, name="night <shift>",
                                          leader_id=small.agent.row["id"], member_ids=[])
    led = await factories.autopilot(small.world, squad["id"], title="by squad", assignee_type="squad")
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/autopilots/{pilot['id']}")).text
    assert '<pre id="instructions">Label each issue.\nClose &lt;dupes&gt;.</pre>' in page
    assignee = page[page.index('id="assignee"'):].split("</td>")[0]
    agent_name = small.agent.row["name"]
    assert f'<a href="/dashboard/agents/{small.agent.row["id"]}">{agent_name}</a>' in assignee
    page = (await client.get(f"/dashboard/autopilots/{led['id']}")).text
    assignee = page[page.index('id="assignee"'):].split("</td>")[0]
    assert "squad night &lt;shift&gt;" in assignee and f'>{agent_name}</a>' in assignee  # led by that agent
    empty = (await client.get(f"/dashboard/autopilots/{small.autopilot['id']}")).text
    assert '<span class="note" id="instructions">none</span>' in empty


async def test_a_completed_run_has_no_empty_actions_box(client, ctx: Context, small: Small):
    async with ctx.pool.acquire() as conn:
        run_id = await factories.dispatched_run(conn, small.autopilot["id"])
        await conn.execute("UPDATE agent_task SET status = 'succeeded', finished_at = now() WHERE run_id = $1", run_id)
        await conn.execute("UPDATE autopilot_run SET status = 'completed', finished_at = now() WHERE id = $1", run_id)
        _, key = await workspaces.add_member(conn, small.world.workspace_id, "viewer", "member")
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/runs/{run_id}")).text
    assert 'id="run-status">completed<' in page and 'id="run-actions"' not in page
    client.cookies.clear()
    await log_in(client, key)
    page = (await client.get(f"/dashboard/runs/{run_id}")).text
    assert 'id="run-actions"' not in page  # nothing to do, nothing to be refused


async def test_the_autopilot_page_shows_a_triggers_scheme_and_sources(client, ctx: Context, small: Small):
    scheme = {"kind": "shared_secret", "header": "Authorization", "prefix": "Bearer "}
    async with ctx.pool.acquire() as conn:
        await conn.execute("UPDATE autopilot_trigger SET provider = 'custom', signature_scheme = $2, "
                           "event_source = 'json:/type' WHERE id = $1", small.trigger["id"], scheme)
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/autopilots/{small.autopilot['id']}")).text
    assert '"kind": "shared_secret"' in page and "<code>json:/type</code>" in page
    assert "the preset's dedupe key" in page


async def test_the_autopilot_page_shows_a_triggers_handshake_with_a_masked_token_and_its_reply(client, ctx: Context,
                                                                                                 small: Small):
    from autopilot import rules

    reply = {"status": 200, "content_type": "text/xml", "body": "<Response><Message>ok</Message></Response>"}
    async with ctx.pool.acquire() as conn:
        await conn.execute("UPDATE autopilot_trigger SET provider = 'meta', reply = $2 WHERE id = $1",
                           small.trigger["id"], reply)
        await rules.set_verify_token(conn, ctx.keyring, small.trigger["id"], "meatyhamhock")
    await log_in(client, small.world.api_key)
    page = (await client.get(f"/dashboard/autopilots/{small.autopilot['id']}")).text
    assert "<code>meta</code>" in page and "(the meta preset's)" in page and "verify token …hock" in page
    assert "meatyhamhock" not in page
    assert "<code>text/xml</code>" in page and "&lt;Response&gt;&lt;Message&gt;ok" in page  # escaped, never markup
    async with ctx.pool.acquire() as conn:
        echo = {"kind": "echo_query", "param": "challenge", "content_type": "text/plain"}
        await conn.execute("UPDATE autopilot_trigger SET handshake = $2, reply = NULL WHERE id = $1",
                           small.trigger["id"], echo)
    page = (await client.get(f"/dashboard/autopilots/{small.autopilot['id']}")).text
    assert "<code>echo_query</code> · parameter <code>challenge</code>" in page and "the JSON receipt" in page

async def test_the_payload_filter_is_on_the_autopilot_page_and_an_ignored_delivery_names_the_node(
        client, ctx: Context, small: Small):
    wanted = {"or": [{"path": "/action", "eq": "opened"}, {"path": "/amount", "gt": 100}]}
    async with ctx.pool.acquire() as conn:
        await conn.execute("UPDATE autopilot_trigger SET payload_filter = $2 WHERE id = $1", small.trigger["id"],
                           wanted)
    await log_in(client, small.world.api_key)
    page = html.unescape((await client.get(f"/dashboard/autopilots/{small.autopilot['id']}")).text)
    assert '<td class="payload-filter"><code>{"or": [{"eq": "opened", "path": "/action"}' in page
    answer = await client.post(f"/hooks/{small.token}", json={"action": "closed", "amount": 7})
    assert answer.json()["status"] == "ignored", answer.text
    page = html.unescape((await client.get(f"/dashboard/deliveries/{answer.json()['delivery_id']}")).text)
    assert "<code>payload_filter</code>" in page
    assert ('<span id="delivery-reason">the payload filter does not match: none of the 2 conditions of /or holds '
            "(node /or)</span>") in page
