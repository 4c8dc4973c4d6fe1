"""POST /hooks/{token}: the twelve steps of ARCHITECTURE §4 in order, and every response body of §11."""

import asyncio
import json
from urllib.parse import urlsplit

import asyncpg
import pytest

from gateway.app import create_app
from gateway.ingress.endpoint import BODY_CAP, NOT_FOUND
from hookgate import crypto, metrics
from sql import Q
from tests import factories
from tests.gateway import ingress_kit as kit

pytestmark = pytest.mark.asyncio


async def test_accepted_delivery_is_queued_with_a_pending_run_and_the_worker_is_woken(ctx, client, conn, db_url):
    h = await kit.hook(ctx)
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(db_url)
    await listener.add_listener("hookgate_deliveries", lambda *args: heard.put_nowait(args[3]))
    try:
        raw, headers = kit.github({"action": "opened", "issue": {"number": 1}})
        r = await client.post(h.path, content=raw, headers=headers)
        body = r.json()
        assert r.status_code == 200
        assert list(body) == ["status", "delivery_id", "run_id", "autopilot_id", "trigger_id"]
        assert body["status"] == "accepted" and body["trigger_id"] == str(h.trigger["id"])
        assert body["autopilot_id"] == str(h.autopilot["id"])
        assert await asyncio.wait_for(heard.get(), 5) == body["delivery_id"]
    finally:
        await listener.close()
    [d] = await kit.deliveries(conn)
    [run] = await kit.runs(conn)
    assert (d["status"], d["signature_status"], d["event"]) == ("queued", "valid", "github.issues.opened")
    assert str(d["id"]) == body["delivery_id"] and str(run["id"]) == body["run_id"] == str(d["run_id"])
    assert d["body"] == raw and d["dedupe_key"] == headers["x-github-delivery"]
    assert d["headers"]["x-hub-signature-256"] is True  # stored as present, never its value
    assert d["response_status"] == 200 and d["response_body"] == body
    assert (run["status"], run["source"], run["webhook_delivery_id"]) == ("pending", "webhook", d["id"])
    assert run["payload"]["event"] == "github.issues.opened" and run["payload"]["payload"]["issue"]["number"] == 1


async def test_an_admitted_deliverys_envelope_is_stored_once_as_its_runs_payload_and_read_back_with_it(
        ctx, client, conn):
    h = await kit.hook(ctx)
    raw, headers = kit.github({"action": "opened", "issue": {"number": 7}})
    assert (await client.post(h.path, content=raw, headers=headers)).json()["status"] == "accepted"
    [d] = await kit.deliveries(conn)
    [run] = await kit.runs(conn)
    assert d["envelope"] is None and run["payload"]["payload"]["issue"]["number"] == 7
    ws = d["workspace_id"]
    assert (await conn.fetchrow(Q.delivery_get, ws, d["id"]))["envelope"] == run["payload"]
    [picked] = await conn.fetch(Q.delivery_replay_select, ws, None, None, None, None, None, None, None, 10, None)
    assert picked["envelope"] == run["payload"]
    [copy] = await conn.fetch(Q.delivery_insert_replays, [d["id"]], ["queued"], [None], [None])
    assert await conn.fetchval("SELECT envelope FROM webhook_delivery WHERE id = $1", copy["id"]) == run["payload"]


async def test_correctly_signed_duplicate_counts_the_attempt_and_wakes_the_queued_original(ctx, client, conn,
                                                                                           db_url):
    h = await kit.hook(ctx)
    raw, headers = kit.github({"action": "opened"})
    first = (await client.post(h.path, content=raw, headers=headers)).json()
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(db_url)
    await listener.add_listener("hookgate_deliveries", lambda *args: heard.put_nowait(args[3]))
    try:
        again = await client.post(h.path, content=raw, headers=headers)
        assert await asyncio.wait_for(heard.get(), 5) == first["delivery_id"]
    finally:
        await listener.close()
    assert again.status_code == 200
    assert again.json() == {"status": "duplicate", "delivery_id": first["delivery_id"], "run_id": first["run_id"],
                            "body_matches": True}
    [d] = await kit.deliveries(conn)
    assert d["attempt_count"] == 2 and len(await kit.runs(conn)) == 1


async def test_duplicate_with_bad_signature_is_rejected_not_deduped_and_charges_debt(db_url):
    async with kit.app_client(db_url, ip_bad_credential_cap=1) as (ctx, client):
        h = await kit.hook(ctx)
        raw, headers = kit.github({"action": "opened"})
        assert (await client.post(h.path, content=raw, headers=headers)).status_code == 200
        forged = headers | {"x-hub-signature-256": "sha256=" + "0" * 64}
        r = await client.post(h.path, content=raw, headers=forged)
        assert r.status_code == 401
        body = r.json()
        assert body["status"] == "rejected" and body["reason"] == "invalid_signature"
        assert body["error"] == "invalid_signature" and body["message"]
        async with ctx.pool.acquire() as conn:
            original, rejected = await kit.deliveries(conn)
        assert original["attempt_count"] == 1  # the forged retry touched nothing
        assert (rejected["status"], rejected["signature_status"]) == ("rejected", "invalid")
        assert str(rejected["id"]) == body["delivery_id"] and rejected["response_status"] == 401
        # The debt is now at its cap: even a valid request from that address is refused.
        raw2, headers2 = kit.github({"action": "closed"})
        limited = await client.post(h.path, content=raw2, headers=headers2)
        assert limited.status_code == 429 and limited.json()["error"] == "rate_limited"
        assert int(limited.headers["retry-after"]) >= 1


async def test_missing_signature_is_rejected(ctx, client, conn):
    h = await kit.hook(ctx)
    raw, headers = kit.github({"action": "opened"})
    del headers["x-hub-signature-256"]
    r = await client.post(h.path, content=raw, headers=headers)
    assert r.status_code == 401 and r.json()["reason"] == "missing_signature"
    [d] = await kit.deliveries(conn)
    assert d["status"] == "rejected" and d["signature_status"] == "missing"


async def test_stripe_signed_by_the_sdk_is_accepted_and_an_old_timestamp_is_expired(ctx, client, conn):
    secret = "whsec_test_stripe_secret"
    h = await kit.hook(ctx, "stripe", secret)
    raw, headers = kit.stripe_signed({"id": "evt_1", "type": "invoice.paid"}, secret)
    r = await client.post(h.path, content=raw, headers=headers)
    assert r.status_code == 200 and r.json()["status"] == "accepted"
    raw, headers = kit.stripe_signed({"id": "evt_2", "type": "invoice.paid"}, secret, ts=1_600_000_000)
    stale = await client.post(h.path, content=raw, headers=headers)
    assert stale.status_code == 401 and stale.json()["reason"] == "expired_timestamp"
    events = [(d["event"], d["dedupe_key"], d["status"]) for d in await kit.deliveries(conn)]
    assert events == [("stripe.invoice.paid", "evt_1", "queued"), ("stripe.invoice.paid", "evt_2", "rejected")]


async def test_standard_webhooks_signed_by_the_sdk_is_accepted(ctx, client, conn):
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    h = await kit.hook(ctx, "standard", secret)
    raw, headers = kit.standard_signed({"type": "invoice.paid"}, secret, msg_id="msg_42")
    r = await client.post(h.path, content=raw, headers=headers)
    assert r.status_code == 200 and r.json()["status"] == "accepted"
    [d] = await kit.deliveries(conn)
    assert (d["dedupe_key"], d["signature_status"], d["event"]) == ("msg_42", "valid", "invoice.paid")


async def test_slack_url_verification_is_answered_with_its_challenge_and_runs_nothing(ctx, client, conn):
    secret = "8f742231b10e8888abcd99yyyzzz85a5"
    h = await kit.hook(ctx, "slack", secret)
    challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    raw, headers = kit.slack_signed({"type": "url_verification", "challenge": challenge}, secret)
    r = await client.post(h.path, content=raw, headers=headers)
    assert r.status_code == 200
    assert r.json() == {"challenge": challenge}
    assert await kit.deliveries(conn) == [] and await kit.runs(conn) == []
    raw, headers = kit.slack_signed({"type": "event_callback", "event_id": "Ev1", "event": {"type": "app_mention"}},
                                    secret)
    r = await client.post(h.path, content=raw, headers=headers)
    assert r.status_code == 200 and r.json()["status"] == "accepted"
    [d] = await kit.deliveries(conn)
    assert (d["event"], d["dedupe_key"]) == ("slack.app_mention", "Ev1")


async def test_bearer_only_trigger_accepts_unsigned_requests(ctx, client, conn):
    h = await kit.hook(ctx, "generic", None)
    r = await client.post(h.path, json={"event": "deploy.finished"}, headers={"idempotency-key": "k1"})
    assert r.status_code == 200 and r.json()["status"] == "accepted"
    [d] = await kit.deliveries(conn)
    assert (d["signature_status"], d["event"], d["dedupe_key"]) == ("not_required", "deploy.finished", "k1")


@pytest.mark.parametrize(("change", "reason"), [
    ("UPDATE autopilot_trigger SET enabled = false", "trigger_disabled"),
    ("UPDATE autopilot SET status = 'paused'", "autopilot_paused"),
    ("UPDATE autopilot SET status = 'archived'", "autopilot_archived"),
    ("""UPDATE autopilot_trigger SET event_filters = '["github.push", "github.pull_request.*"]'""", "event_filtered"),
])
async def test_not_admitted_deliveries_are_ignored_with_200_and_a_reason(ctx, client, conn, change, reason):
    h = await kit.hook(ctx)
    await conn.execute(change)
    r = await kit.post_github(client, h, {"action": "opened"}, event="issues")
    assert r.status_code == 200
    assert r.json() == {"status": "ignored", "delivery_id": r.json()["delivery_id"], "reason": reason}
    [d] = await kit.deliveries(conn)
    assert (d["status"], d["reason_code"], str(d["id"])) == ("ignored", reason, r.json()["delivery_id"])
    assert d["reason"] and d["envelope"]["event"] == "github.issues.opened"
    assert await kit.runs(conn) == []


async def test_event_filter_globs_match_case_insensitively(ctx, client, conn):
    h = await kit.hook(ctx, event_filters=["GitHub.Pull_Request.*"])
    r = await kit.post_github(client, h, {"action": "opened"}, event="pull_request")
    assert r.json()["status"] == "accepted"


async def test_gate_refusal_is_a_skipped_run_with_reason_and_the_delivery_needs_no_worker(ctx, client, conn):
    h = await kit.hook(ctx, pull=True)  # run_only with a pull runtime that never heartbeated
    r = await kit.post_github(client, h, {"action": "opened"})
    body = r.json()
    assert r.status_code == 200 and list(body) == ["status", "delivery_id", "run_id", "reason"]
    assert (body["status"], body["reason"]) == ("skipped", "runtime_offline")
    [d] = await kit.deliveries(conn)
    [run] = await kit.runs(conn)
    assert (run["status"], run["reason_code"], str(run["id"])) == ("skipped", "runtime_offline", body["run_id"])
    assert run["reason"] and run["finished_at"] is not None
    assert (d["status"], d["run_id"]) == ("dispatched", run["id"])


async def test_admission_internal_error_leaves_the_delivery_queued_for_the_worker(ctx, client, conn):
    h = await kit.hook(ctx)
    # Fault injection in the database: any run insert fails, as a bug in the gate would.
    await conn.execute("""
        CREATE FUNCTION test_refuse_run() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'injected admission failure'; END $$;
        CREATE TRIGGER test_refuse_run BEFORE INSERT ON autopilot_run FOR EACH ROW EXECUTE FUNCTION test_refuse_run();
    """)
    raw, headers = kit.github({"action": "opened"})
    r = await client.post(h.path, content=raw, headers=headers)
    assert r.status_code == 200
    assert r.json()["status"] == "accepted" and r.json()["run_id"] is None
    [d] = await kit.deliveries(conn)
    assert (d["status"], d["run_id"]) == ("queued", None) and d["envelope"]["event"] == "github.issues.opened"
    assert await kit.runs(conn) == []
    again = (await client.post(h.path, content=raw, headers=headers)).json()
    assert again == {"status": "duplicate", "delivery_id": str(d["id"]), "run_id": None, "body_matches": True}


async def test_every_kind_of_miss_is_the_same_404_bytes(ctx, client, conn):
    h = await kit.hook(ctx)
    schedule_ap = await factories.autopilot(h.w, h.autopilot["assignee_id"], title="cron")
    deleted = await kit.hook(ctx, workspace="other")
    await conn.execute("UPDATE autopilot_trigger SET deleted_at = now() WHERE id = $1", deleted.trigger["id"])
    await factories.schedule_trigger(h.w, schedule_ap, "0 * * * *", next_fire_at=await conn.fetchval("SELECT now()"))
    raw, headers = kit.github({"action": "opened"})
    misses = [
        "/hooks/awt_short", "/hooks/" + crypto.new_token("hgk_"), "/hooks/" + crypto.new_token("awt_"),
        "/hooks/" + h.token[:-1] + "!", deleted.path, h.path + "/extra", "/hooks/" + h.token.upper(),
    ]
    for path in misses:
        r = await client.post(path, content=raw, headers=headers)
        assert (r.status_code, r.content) == (404, NOT_FOUND), path
    assert await kit.deliveries(conn) == []


async def test_workspace_mismatch_between_trigger_and_autopilot_is_the_same_404(ctx, client, conn):
    h = await kit.hook(ctx)
    other = await factories.world(ctx, "elsewhere")
    await conn.execute("UPDATE autopilot_trigger SET workspace_id = $1 WHERE id = $2", other.workspace_id,
                       h.trigger["id"])
    r = await kit.post_github(client, h, {"action": "opened"})
    assert (r.status_code, r.content) == (404, NOT_FOUND)
    assert await kit.deliveries(conn) == []


async def test_unknown_token_costs_no_body_read(ctx):
    app = create_app(ctx)
    token = crypto.new_token("awt_")
    status, body, reads = await kit.asgi_post(app, f"/hooks/{token}", [b"{}"], [(b"content-type", b"application/json")])
    assert (status, body, reads) == (404, NOT_FOUND, 0)


async def test_over_the_cap_with_an_unknown_token_is_404_not_413(ctx):
    app = create_app(ctx)
    big = [b"x" * 65536] * 8
    headers = [(b"content-length", str(BODY_CAP * 2).encode())]
    status, body, reads = await kit.asgi_post(app, "/hooks/" + crypto.new_token("awt_"), big, headers)
    assert (status, body, reads) == (404, NOT_FOUND, 0)


async def test_body_over_256_kib_is_413_while_streaming_whatever_content_length_says(ctx, conn):
    h = await kit.hook(ctx)
    app = create_app(ctx)
    _, headers = kit.github({"action": "opened"})
    sig = [(b"x-hub-signature-256", headers["x-hub-signature-256"].encode())]
    declared = [(b"content-length", str(BODY_CAP + 1).encode()), *sig]
    status, body, reads = await kit.asgi_post(app, h.path, [b"{}"], declared)
    assert (status, json.loads(body)["error"], reads) == (413, "payload_too_large", 0)
    lying = [(b"content-length", b"10"), *sig]  # says 10 bytes, streams 320 KiB
    status, body, reads = await kit.asgi_post(app, h.path, [b"[" + b"1," * 32768] * 5, lying)
    assert (status, json.loads(body)["error"]) == (413, "payload_too_large") and reads == 4  # stops at the cap
    chunked = [(b"transfer-encoding", b"chunked"), *sig]
    status, _, _ = await kit.asgi_post(app, h.path, [b" " * 65536] * 5, chunked)
    assert status == 413
    exactly = b'{"a":"' + b"x" * (BODY_CAP - 8) + b'"}'
    _, headers = kit.github(exactly)
    status, _, _ = await kit.asgi_post(app, h.path, [exactly], [(k.encode(), v.encode()) for k, v in headers.items()])
    assert status == 200  # the cap is inclusive
    assert len(await kit.deliveries(conn)) == 1


@pytest.mark.parametrize(("content", "content_type", "status", "code"), [
    (b"", "application/json", 400, "invalid_body"),
    (b"{not json", "application/json", 400, "invalid_body"),
    (b"42", "application/json", 400, "invalid_body"),
    (b'{"a": "\\u0000"}', "application/json", 400, "invalid_body"),
    (b'{"a": 1e999}', "application/json", 400, "invalid_body"),
    (b'{"a": "\\ud800"}', "application/json", 400, "invalid_body"),
    (b'{"\\udc00": 1}', "application/json", 400, "invalid_body"),
    (b"<xml/>", "application/octet-stream", 415, "unsupported_media_type"),
    (b"", "text/plain", 400, "invalid_body"),
])
async def test_bad_bodies_are_400_or_415_and_nothing_is_stored(ctx, client, conn, content, content_type, status,
                                                                 code):
    h = await kit.hook(ctx)
    raw, headers = kit.github(content)
    r = await client.post(h.path, content=raw, headers=headers | {"content-type": content_type})
    assert r.status_code == status
    assert r.json()["error"] == code and r.json()["message"] and "Traceback" not in r.text
    assert await kit.deliveries(conn) == []


async def test_form_bodies_and_a_bom_are_accepted(ctx, client, conn):
    h = await kit.hook(ctx, "generic", None)
    r = await client.post(h.path, content=b"payload=%7B%22event%22%3A%22form.sent%22%7D",
                          headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200
    r = await client.post(h.path, content=b'\xef\xbb\xbf{"event":"bom.sent"}',
                          headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert [d["event"] for d in await kit.deliveries(conn)] == ["form.sent", "bom.sent"]


async def test_rotated_token_is_404_at_once_even_with_a_warm_cache(ctx, client, conn):
    h = await kit.hook(ctx)
    assert (await kit.post_github(client, h, {"action": "opened"})).status_code == 200  # cache is warm now
    await conn.execute("UPDATE autopilot_trigger SET token_digest = $1 WHERE id = $2",
                       crypto.digest(crypto.new_token("awt_")), h.trigger["id"])
    r = await kit.post_github(client, h, {"action": "closed"})
    assert (r.status_code, r.content) == (404, NOT_FOUND)
    assert len(await kit.deliveries(conn)) == 1


async def test_concurrent_requests_on_a_cold_cache_share_one_token_lookup(ctx, client, conn):
    h = await kit.hook(ctx)
    before = metrics.REGISTRY.get_sample_value("hookgate_ingress_token_lookups_total") or 0
    signed = [kit.github({"action": "opened", "n": n}) for n in range(16)]
    answers = await asyncio.gather(*(client.post(h.path, content=raw, headers=headers) for raw, headers in signed))
    assert [r.json()["status"] for r in answers] == ["accepted"] * 16
    assert metrics.REGISTRY.get_sample_value("hookgate_ingress_token_lookups_total") == before + 1
    unknown = "awt_" + "x" * 43  # well-formed, unknown: misses are not cached, but concurrent ones share a query
    misses = await asyncio.gather(*(client.post(f"/hooks/{unknown}", content=b"{}") for _ in range(8)))
    assert {(r.status_code, r.content) for r in misses} == {(404, NOT_FOUND)}
    assert metrics.REGISTRY.get_sample_value("hookgate_ingress_token_lookups_total") == before + 2
    assert len(await kit.deliveries(conn)) == 16


async def test_a_pause_and_a_new_secret_apply_at_once_even_with_a_warm_cache(ctx, client, conn):
    from autopilot import rules

    h = await kit.hook(ctx)
    assert (await kit.post_github(client, h, {"action": "opened"})).status_code == 200
    await conn.execute("UPDATE autopilot SET status = 'paused' WHERE id = $1", h.autopilot["id"])
    assert (await kit.post_github(client, h, {"action": "edited"})).json()["reason"] == "autopilot_paused"
    await conn.execute("UPDATE autopilot SET status = 'active' WHERE id = $1", h.autopilot["id"])
    await rules.set_signing_secret(conn, ctx.keyring, h.trigger["id"], "brand-new")
    raw, headers = kit.github({"action": "closed"})  # signed with the old secret, no grace window
    assert (await client.post(h.path, content=raw, headers=headers)).json()["reason"] == "invalid_signature"
    r = await kit.post_github(client, h, {"action": "reopened"}, secret="brand-new")
    assert r.json()["status"] == "accepted"


async def test_previous_secret_verifies_only_during_its_grace_window(ctx, client, conn):
    from autopilot import rules

    h = await kit.hook(ctx)
    await rules.set_signing_secret(conn, ctx.keyring, h.trigger["id"], "next-secret", grace_seconds=3600)
    raw, headers = kit.github({"action": "opened"})  # the previous secret
    assert (await client.post(h.path, content=raw, headers=headers)).json()["status"] == "accepted"
    r = await kit.post_github(client, h, {"action": "opened"}, secret="next-secret")
    assert r.json()["status"] == "accepted"
    await conn.execute("UPDATE autopilot_trigger SET previous_secret_expires_at = now() - interval '1 second'")
    assert (await kit.post_github(client, h, {"action": "closed"})).json()["reason"] == "invalid_signature"


async def test_concurrent_identical_deliveries_store_one_row_and_one_run(ctx, client, conn):
    h = await kit.hook(ctx)
    raw, headers = kit.github({"action": "opened"})
    answers = await asyncio.gather(*(client.post(h.path, content=raw, headers=headers) for _ in range(12)))
    statuses = sorted(a.json()["status"] for a in answers)
    assert statuses == ["accepted"] + ["duplicate"] * 11
    assert len({a.json()["delivery_id"] for a in answers}) == 1
    [d] = await kit.deliveries(conn)
    assert d["attempt_count"] == 12 and len(await kit.runs(conn)) == 1


async def test_database_unreachable_is_503_with_retry_after(db_url):
    async with kit.app_client(db_url) as (ctx, client):
        h = await kit.hook(ctx)
        await ctx.pool.close()  # every acquire now fails
        raw, headers = kit.github({"action": "opened"})
        r = await client.post(h.path, content=raw, headers=headers)
        assert r.status_code == 503 and r.json()["error"] == "unavailable"
        assert int(r.headers["retry-after"]) >= 1


async def test_pool_pointed_at_a_closed_port_is_503(db_url):
    import socket

    from hookgate import database
    from hookgate.context import Context

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with kit.app_client(db_url) as (ctx, _):
        h = await kit.hook(ctx)
        dead = await database.create_pool(f"postgresql://postgres@127.0.0.1:{port}/x", min_size=0, max_size=2)
        try:
            app = create_app(Context(ctx.settings, ctx.dsn, dead, ctx.keyring))
            raw, headers = kit.github({"action": "opened"})
            status, body, _ = await kit.asgi_post(app, h.path, [raw], [(k.encode(), v.encode())
                                                                       for k, v in headers.items()])
            assert status == 503 and json.loads(body)["error"] == "unavailable"
        finally:
            await dead.close()


async def test_terminated_backends_and_an_exhausted_pool_are_503(db_url, server_url):
    async with kit.app_client(db_url, pool_max_size=1, pool_acquire_timeout=0.2) as (ctx, client):
        h = await kit.hook(ctx)
        assert (await kit.post_github(client, h, {"action": "opened"})).status_code == 200
        async with ctx.pool.acquire():  # the only connection is busy: acquire times out
            raw, headers = kit.github({"action": "edited"})
            r = await client.post(h.path, content=raw, headers=headers)
            assert r.status_code == 503 and "retry-after" in r.headers
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                                urlsplit(db_url).path.lstrip("/"))
        finally:
            await admin.close()
        raw, headers = kit.github({"action": "closed"})
        r = await client.post(h.path, content=raw, headers=headers)
        assert r.status_code in (200, 503)  # never a 2xx without a commit; the pool reconnects next time
        if r.status_code == 503:
            assert (await client.post(h.path, content=raw, headers=headers)).status_code == 200


async def test_steps_run_in_the_design_order(db_url):
    """Each pair of adjacent gates, hit together, answers with the earlier step."""
    async with kit.app_client(db_url, ip_request_cap=5) as (ctx, client):
        h = await kit.hook(ctx)
        app = client._transport.app  # type: ignore[attr-defined]
        async with ctx.pool.acquire() as conn:
            # 3 before 4: over the cap on a trigger whose workspace disagrees is 413, not 404.
            other = await factories.world(ctx, "elsewhere")
            await conn.execute("UPDATE autopilot_trigger SET workspace_id = $1", other.workspace_id)
            status, _, _ = await kit.asgi_post(app, h.path, [b"{}"], [(b"content-length", b"300000")])
            assert status == 413
            await conn.execute("UPDATE autopilot_trigger SET workspace_id = $1", h.w.workspace_id)
            # 5 before 6: an invalid body with a forged signature is 400, and nothing is stored.
            forged = kit.github({"x": 1})[1] | {"x-hub-signature-256": "sha256=00"}
            assert (await client.post(h.path, content=b"{oops", headers=forged)).status_code == 400
            # 8 before 9: a forged request to a disabled trigger is rejected (401), not ignored.
            await conn.execute("UPDATE autopilot_trigger SET enabled = false")
            r = await client.post(h.path, content=b'{"a":1}', headers=forged)
            assert (r.status_code, r.json()["status"]) == (401, "rejected")
            # 7 before 9: a correctly signed retry of an ignored delivery is a duplicate.
            raw, headers = kit.github({"action": "opened"})
            assert (await client.post(h.path, content=raw, headers=headers)).json()["status"] == "ignored"
            assert (await client.post(h.path, content=raw, headers=headers)).json()["status"] == "duplicate"
            # 1 before 2: the sixth request from this address is 429, even with a valid token.
            assert (await client.post(h.path, content=raw, headers=headers)).status_code == 429
            assert [d["status"] for d in await kit.deliveries(conn)] == ["rejected", "ignored"]
