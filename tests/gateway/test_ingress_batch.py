"""Ingress group commit: concurrent deliveries share statements, yet each is decided and answered alone."""

import asyncio
from datetime import UTC

import asyncpg
import pytest

from gateway.ingress.endpoint import NOT_FOUND
from hookgate import crypto
from tests.gateway import ingress_kit as kit

pytestmark = pytest.mark.asyncio


async def _post_all(client, path, requests):
    return await asyncio.gather(*(client.post(path, content=raw, headers=headers) for raw, headers in requests))


async def test_concurrent_deliveries_share_commits_and_each_gets_its_own_ids(db_url):
    async with kit.app_client(db_url, ingest_inflight=1) as (ctx, client):
        h = await kit.hook(ctx)
        answers = await _post_all(client, h.path, [kit.github({"action": "opened", "n": i}) for i in range(40)])
        async with ctx.pool.acquire() as conn:
            rows = {str(d["id"]): d for d in await kit.deliveries(conn)}
            runs = {str(r["webhook_delivery_id"]): r for r in await kit.runs(conn)}
            commits = await conn.fetchval("SELECT count(DISTINCT xmin::text) FROM webhook_delivery")
    bodies = [a.json() for a in answers]
    assert {(a.status_code, b["status"]) for a, b in zip(answers, bodies, strict=True)} == {(200, "accepted")}
    assert len({b["delivery_id"] for b in bodies}) == 40 == len(rows) == len(runs)
    for b in bodies:
        d = rows[b["delivery_id"]]
        assert str(runs[b["delivery_id"]]["id"]) == b["run_id"] == str(d["run_id"])
        assert d["response_body"] == {k: v for k, v in b.items()}  # the stored answer is the one sent
    assert commits < 40  # rows of one statement share their transaction id


async def test_requests_sharing_a_dedupe_key_in_one_batch_make_one_delivery(db_url):
    async with kit.app_client(db_url, ingest_inflight=1) as (ctx, client):
        h = await kit.hook(ctx)
        raw, headers = kit.github({"action": "opened"})
        answers = await _post_all(client, h.path, [(raw, headers)] * 12)
        async with ctx.pool.acquire() as conn:
            [d] = await kit.deliveries(conn)
            assert len(await kit.runs(conn)) == 1
    assert sorted(a.json()["status"] for a in answers) == ["accepted"] + ["duplicate"] * 11
    assert {a.json()["delivery_id"] for a in answers} == {str(d["id"])} and d["attempt_count"] == 12


async def test_a_failing_row_does_not_fail_its_batch(db_url):
    async with kit.app_client(db_url, ingest_inflight=1) as (ctx, client):
        h = await kit.hook(ctx)
        async with ctx.pool.acquire() as conn:
            # Fault injection: the run of one event fails to insert, as a bug in the gate would.
            await conn.execute("""
                CREATE FUNCTION test_refuse_run() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.payload->>'event' = 'github.issues.deleted' THEN RAISE EXCEPTION 'injected'; END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER test_refuse_run BEFORE INSERT ON autopilot_run
                    FOR EACH ROW EXECUTE FUNCTION test_refuse_run();
            """)
        actions = ["opened"] * 5 + ["deleted"] + ["closed"] * 5
        answers = await _post_all(client, h.path, [kit.github({"action": a}) for a in actions])
        async with ctx.pool.acquire() as conn:
            rows = {str(d["id"]): d for d in await kit.deliveries(conn)}
    assert [a.status_code for a in answers] == [200] * 11
    bodies = [a.json() for a in answers]
    assert all(b["status"] == "accepted" for b in bodies) and len(rows) == 11
    refused = bodies[actions.index("deleted")]
    assert refused["run_id"] is None and rows[refused["delivery_id"]]["status"] == "queued"
    assert all(b["run_id"] is not None for b in bodies if b is not refused)


async def test_a_rotated_trigger_in_a_batch_is_404_and_its_neighbours_are_stored(db_url):
    async with kit.app_client(db_url, ingest_inflight=1) as (ctx, client):
        kept, rotated = await kit.hook(ctx), await kit.hook(ctx, workspace="beta")
        for h in (kept, rotated):  # warm both cache entries
            raw, headers = kit.github({"action": "opened"})
            assert (await client.post(h.path, content=raw, headers=headers)).status_code == 200
        await ctx.pool.execute("UPDATE autopilot_trigger SET token_digest = $1 WHERE id = $2",
                               crypto.digest(crypto.new_token("awt_")), rotated.trigger["id"])
        posts = [(h, kit.github({"action": "edited", "n": i})) for i in range(6) for h in (kept, rotated)]
        answers = await asyncio.gather(*(client.post(h.path, content=raw, headers=headers)
                                         for h, (raw, headers) in posts))
        async with ctx.pool.acquire() as conn:
            stored = await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE trigger_id = $1",
                                         rotated.trigger["id"])
            kept_rows = await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE trigger_id = $1",
                                            kept.trigger["id"])
    for (h, _), answer in zip(posts, answers, strict=True):
        if h is rotated:
            assert (answer.status_code, answer.content) == (404, NOT_FOUND)
        else:
            assert answer.json()["status"] == "accepted"
    assert (stored, kept_rows) == (1, 7)


async def _keep_alive_client(port: int, requests: list[bytes]) -> list[int]:
    """Send requests one after another on one keep-alive connection; the status codes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    statuses = []
    try:
        for request in requests:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            at = head.lower().index(b"content-length:")
            await reader.readexactly(int(head[at + 15:head.index(b"\r\n", at)]))
            statuses.append(int(head[9:12]))
    finally:
        writer.close()
    return statuses


def _raw_request(path: str, raw: bytes, headers: dict[str, str]) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{lines}content-length: {len(raw)}\r\n\r\n".encode() + raw


async def test_no_request_is_stranded_when_writers_finish_as_others_queue(ctx, conn, spawn):
    # A real gateway under 64 keep-alive connections, two writers: a write queued in the very loop turn a
    # writer finished in once found no writer to take it, and the whole gateway went idle with 64 queued.
    h = await kit.hook(ctx)
    gateway = spawn.start("gateway", gateway=True, extra_env={
        "HOOKGATE_INGEST_INFLIGHT": "2", "HOOKGATE_IP_REQUEST_CAP": "1000000", "HOOKGATE_LOG_LEVEL": "warning"})
    gateway.wait_ready()
    assert gateway.port is not None
    clients = [[_raw_request(h.path, *kit.github({"action": "opened", "c": c, "n": n})) for n in range(40)]
               for c in range(64)]
    answers = await asyncio.wait_for(asyncio.gather(*(_keep_alive_client(gateway.port, reqs) for reqs in clients)),
                                     60)
    assert {s for statuses in answers for s in statuses} == {200}
    assert await conn.fetchval("SELECT count(*) FROM webhook_delivery") == 64 * 40


async def _listening(db_url):
    heard: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    listener = await asyncpg.connect(db_url)
    await listener.add_listener("hookgate_deliveries", lambda _c, pid, _ch, payload: heard.put_nowait((pid, payload)))
    return listener, heard


async def test_a_request_written_alone_is_announced_by_its_own_commit(db_url):
    async with kit.app_client(db_url) as (ctx, client):
        h = await kit.hook(ctx)
        raw, headers = kit.github({"action": "opened"})
        listener, heard = await _listening(db_url)
        try:
            r = await client.post(h.path, content=raw, headers=headers)
            _, payload = await asyncio.wait_for(heard.get(), 5)
        finally:
            await listener.close()
        state = client._transport.app.state.ingress  # type: ignore[attr-defined]  # made by the first request
        await state.notifier.settled()
    assert r.status_code == 200 and payload == r.json()["delivery_id"]
    assert state.notifier.sent == 0  # no wake-up of its own after the commit: the commit carried it


async def test_a_duplicate_written_alone_announces_the_queued_original_not_its_own_id(db_url):
    async with kit.app_client(db_url) as (ctx, client):
        h = await kit.hook(ctx)
        raw, headers = kit.github({"action": "opened"})
        first = (await client.post(h.path, content=raw, headers=headers)).json()
        listener, heard = await _listening(db_url)
        try:
            again = await client.post(h.path, content=raw, headers=headers)
            _, payload = await asyncio.wait_for(heard.get(), 5)
            await asyncio.sleep(0.2)  # anything else announced would have arrived by now
        finally:
            await listener.close()
    assert again.json()["status"] == "duplicate" and payload == first["delivery_id"] and heard.empty()


async def test_concurrent_requests_are_all_announced_whichever_way_they_are_written(db_url):
    async with kit.app_client(db_url, ingest_inflight=2) as (ctx, client):
        h = await kit.hook(ctx)
        listener, heard = await _listening(db_url)
        try:
            answers = await _post_all(client, h.path, [kit.github({"action": "opened", "n": i}) for i in range(30)])
            state = client._transport.app.state.ingress  # type: ignore[attr-defined]
            await state.notifier.settled()
            await asyncio.sleep(0.2)  # the last notification can arrive after its sender's answer
        finally:
            await listener.close()
    announced = set()
    while not heard.empty():
        announced.update((await heard.get())[1].split(","))
    assert {a.json()["delivery_id"] for a in answers} <= announced
    assert state.notifier.sent > 0  # batches of several were announced after their commits


async def test_a_batch_stores_each_request_s_own_time_and_headers_exactly(db_url):
    # received_at travels as integer microseconds and the headers as JSON text: both must land as they were made.
    async with kit.app_client(db_url, ingest_inflight=1) as (ctx, client):
        h = await kit.hook(ctx)
        requests = [kit.github({"action": "opened", "n": i}) for i in range(12)]
        await _post_all(client, h.path, requests)
        async with ctx.pool.acquire() as conn:
            rows = await conn.fetch("""
                SELECT d.received_at, d.headers, r.payload FROM webhook_delivery d
                JOIN autopilot_run r ON r.webhook_delivery_id = d.id""")
    assert len(rows) == 12
    sent = {headers["x-github-delivery"] for _, headers in requests}
    assert {row["headers"]["x-github-delivery"] for row in rows} == sent
    for row in rows:
        assert row["headers"]["x-hub-signature-256"] is True and row["headers"]["content-type"] == "application/json"
        stamp = row["received_at"].astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        assert row["payload"]["request"]["received_at"] == stamp


async def test_requests_of_one_batch_keep_their_own_event_content_type_and_signature(db_url):
    # Content type, event, dedupe source and signature status are sent once per distinct set in a batch.
    async with kit.app_client(db_url, ingest_inflight=1) as (ctx, client):
        h = await kit.hook(ctx)
        requests = []
        for i in range(24):
            raw, headers = kit.github({"action": ["opened", "closed", "edited"][i % 3], "n": i})
            if i % 4 == 0:
                headers["content-type"] = "application/json; charset=utf-8"
            if i % 5 == 0:
                headers["x-hub-signature-256"] = "sha256=" + "0" * 64
            requests.append((raw, headers))
        answers = await _post_all(client, h.path, requests)
        async with ctx.pool.acquire() as conn:
            rows = {r["dedupe_key"]: r for r in await conn.fetch(
                "SELECT dedupe_key, event, content_type, signature_status, dedupe_source FROM webhook_delivery")}
    assert len(rows) == 24 and sum(a.status_code == 401 for a in answers) == 5
    for i, (_, headers) in enumerate(requests):
        row = rows[headers["x-github-delivery"]]
        assert row["event"] == "github.issues." + ["opened", "closed", "edited"][i % 3]
        assert row["content_type"] == headers["content-type"]
        assert row["signature_status"] == ("invalid" if i % 5 == 0 else "valid")
        assert row["dedupe_source"] == "header:x-github-delivery"
