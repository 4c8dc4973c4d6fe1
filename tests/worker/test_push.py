import asyncio
import base64
import time
from datetime import UTC, datetime

import httpx
from standardwebhooks import Webhook
from starlette.responses import JSONResponse, Response

from autopilot import dispatch
from gateway.app import create_app
from hookgate import database, notify
from hookgate.context import open_context
from hookgate.crypto import webhook_signature as sign
from hookgate.notify import NotifyListener
from tests import factories
from tests.conftest import make_settings
from tests.worker.conftest import FAST, UNPACED, add_delivery, agent_world, answer, push_loop, wait_for
from worker.deliveries import DeliveryWorker
from worker.push import CLAIM_WAIT_S, Pusher, PushWorker, claim_floor, classify, retry_after_s


async def _world(ctx, agent_server, name="a", **agent_kw):
    s = await agent_world(ctx, agent_server.url(name), name=name, trigger=UNPACED, **agent_kw)
    return s.world, s.agent, s.autopilot, s.trigger


async def _taken(ctx, ap, trigger, **delivery_kw):
    """One delivery, taken by a delivery worker with a fresh pusher (the push starts); the run's id and the pusher."""
    async with ctx.pool.acquire() as conn:
        _, run_id = await add_delivery(conn, ap, trigger, **delivery_kw)
    pusher = Pusher(ctx, holder="t1")
    assert await DeliveryWorker(ctx, holder="t1", pusher=pusher).run_once() == 1
    return run_id, pusher


async def _task(conn, run_id):
    return await conn.fetchrow("SELECT * FROM agent_task WHERE run_id = $1", run_id)


def test_signature_is_standard_webhooks_and_verifies_with_the_reference_library():
    secret = "whsec_" + base64.b64encode(b"s" * 32).decode()
    body = b'{"a":1}'
    stamp = int(time.time())
    sig = sign(secret, "msg_1", stamp, body)
    assert sig == Webhook(secret).sign("msg_1", datetime.fromtimestamp(stamp, UTC), body.decode())
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(stamp), "webhook-signature": sig}
    assert Webhook(secret).verify(body, headers) == {"a": 1}


def test_outcomes_map_status_codes_and_honour_retry_after():
    def out(code, headers=None, body=b""):
        return classify(code, headers or {}, body)

    assert out(200).kind == out(204).kind == "done"
    assert out(202).kind == "accepted"
    assert {out(c).kind for c in (408, 429, 500, 502, 503)} == {"retry"}
    assert {out(c).kind for c in (400, 401, 404, 410, 422)} == {"terminal"}
    assert out(429, {"retry-after": "7"}).hint == 7.0 and out(503).hint is None
    assert {out(c).label for c in (200, 204)} == {"succeeded"} and out(202).label == "accepted"
    assert {out(c).label for c in (404, 500)} == {"failed"}
    kept = out(500, {"content-type": "text/plain", "set-cookie": "s=1", "x-request-id": "r1"}, b"x" * 5000 + b"\xff")
    assert kept.http_status == 500 and kept.headers == {"content-type": "text/plain", "x-request-id": "r1"}
    assert kept.body == "x" * 4096
    assert out(502, body="\u00e9\x00".encode() * 3000).body.encode().__len__() <= 4096
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_s("soon") is None


async def test_fast_path_pushes_once_with_the_contract_body_and_a_valid_signature(wctx, agent_server):
    _w, agent, ap, trigger = await _world(wctx, agent_server)
    run_id, pusher = await _taken(wctx, ap, trigger, payload={"x": 1})
    await pusher.stop(deadline=10)
    [hit] = agent_server.of("a")
    async with wctx.pool.acquire() as conn:
        task = await _task(conn, run_id)
        run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
    body = hit.body
    assert set(body) == {"task_id", "run_id", "attempt", "autopilot", "payload", "lease_token", "report_url"}
    assert body["task_id"] == str(task["id"]) == hit.headers["webhook-id"]
    assert body["run_id"] == str(run_id) and body["attempt"] == 1
    assert body["autopilot"] == {"id": str(ap["id"]), "title": "triage", "instructions": ""}
    assert body["payload"]["payload"] == {"x": 1}
    assert body["report_url"] == f"http://hooks.test/v1/runtime/tasks/{task['id']}/report"
    Webhook(agent.signing_secret).verify(hit.raw, hit.headers)
    assert task["status"] == "succeeded" and task["result"]["body"] == {"ok": True}
    assert run["status"] == "completed" and run["finished_at"] is not None


async def test_agent_answering_500_then_200_gets_the_same_webhook_id_and_completes_once(wctx, agent_server):
    async def flaky(n, hit):
        return Response(status_code=500) if n == 0 else JSONResponse({"done": True})

    agent_server.behaviours["a"] = flaky
    _w, _agent, ap, trigger = await _world(wctx, agent_server)
    run_id, pusher = await _taken(wctx, ap, trigger)
    pushes = PushWorker(wctx, holder="t1", pusher=pusher)

    async def finished():
        await pushes.run_once()
        async with wctx.pool.acquire() as conn:
            return (await _task(conn, run_id))["status"] == "succeeded"

    await wait_for(finished)
    await pusher.stop(deadline=10)
    hits = agent_server.of("a")
    assert len(hits) == 2 and hits[0].headers["webhook-id"] == hits[1].headers["webhook-id"]
    assert [h.body["attempt"] for h in hits] == [1, 2]
    async with wctx.pool.acquire() as conn:
        task = await _task(conn, run_id)
        releases = await conn.fetch("SELECT detail FROM audit_log WHERE action = 'RELEASE' AND subject_id = $1 "
                                    "ORDER BY id", str(task["id"]))
    assert task["attempt"] == 2
    assert [r["detail"]["status"] for r in releases] == ["queued", "succeeded"]


async def test_retry_after_is_honoured_and_4xx_is_terminal(ctx, agent_server):
    agent_server.behaviours["slow"] = answer(Response(status_code=429, headers={"Retry-After": "30"}))
    agent_server.behaviours["gone"] = answer(Response(status_code=404))
    w = await factories.world(ctx)
    runs = {}
    for name in ("slow", "gone"):
        agent = await factories.http_agent(w, url=agent_server.url(name), name=name)
        ap = await factories.autopilot(w, agent.row["id"], title=name)
        trigger, _ = await factories.webhook_trigger(w, ap)
        async with ctx.pool.acquire() as conn:
            runs[name] = (await add_delivery(conn, ap, trigger))[1]
    pusher = Pusher(ctx, holder="t1")
    await DeliveryWorker(ctx, holder="t1", pusher=pusher).run_once()
    await pusher.stop(deadline=10)
    async with ctx.pool.acquire() as conn:
        slow = await _task(conn, runs["slow"])
        gone = await _task(conn, runs["gone"])
        delay = await conn.fetchval("SELECT extract(epoch FROM $1 - now())", slow["available_at"])
        failed_run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", runs["gone"])
    assert slow["status"] == "queued" and 25 < float(delay) <= 30
    assert gone["status"] == "failed" and "404" in gone["error"]
    assert failed_run["status"] == "failed" and failed_run["reason_code"] == "task_failed"


async def test_accepted_push_is_finished_by_the_agent_reporting_with_its_lease_token(wctx, agent_server):
    agent_server.behaviours["a"] = answer(Response(status_code=202))
    _w, _agent, ap, trigger = await _world(wctx, agent_server)
    run_id, pusher = await _taken(wctx, ap, trigger)
    await pusher.stop(deadline=10)
    body = agent_server.of("a")[0].body
    async with wctx.pool.acquire() as conn:
        task = await _task(conn, run_id)
        left = await conn.fetchval("SELECT extract(epoch FROM lease_expires_at - now()) FROM agent_task WHERE id=$1",
                                   task["id"])
    assert task["status"] == "running" and float(left) > 3600  # the long task lease, renewable
    transport = httpx.ASGITransport(app=create_app(wctx))
    async with httpx.AsyncClient(transport=transport, base_url="http://hooks.test") as http:
        forged = await http.post(body["report_url"], json={"lease_token": str(task["id"]), "status": "succeeded"})
        done = await http.post(body["report_url"], json={"lease_token": body["lease_token"], "status": "succeeded",
                                                         "result": {"answer": 42}})
    assert forged.status_code == 409 and forged.json()["error"] == "lease_lost"
    assert done.status_code == 200 and done.json()["status"] == "succeeded"
    async with wctx.pool.acquire() as conn:
        run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", run_id)
        task = await _task(conn, run_id)
    assert run["status"] == "completed" and task["result"] == {"answer": 42}


async def test_a_hanging_agent_does_not_stall_the_others(wctx, agent_server):
    release = asyncio.Event()

    async def hang(n, hit):
        await release.wait()
        return Response(status_code=200)

    agent_server.behaviours["hang"] = hang
    w = await factories.world(wctx)
    runs = {"hang": [], "fine": []}
    for name in runs:
        agent = await factories.http_agent(w, url=agent_server.url(name), name=name, timeout_s=30,
                                           max_concurrency=2)
        ap = await factories.autopilot(w, agent.row["id"], title=name)
        trigger, _ = await factories.webhook_trigger(w, ap, **UNPACED)
        async with wctx.pool.acquire() as conn:
            for _ in range(6 if name == "hang" else 20):
                runs[name].append((await add_delivery(conn, ap, trigger))[1])
    pusher = Pusher(wctx, holder="t1")
    deliveries = DeliveryWorker(wctx, holder="t1", pusher=pusher)
    pushes = PushWorker(wctx, holder="t1", pusher=pusher)

    async def fine_done():
        await deliveries.run_once()
        await pushes.run_once()
        async with wctx.pool.acquire() as conn:
            return await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = ANY($1) "
                                       "AND status = 'succeeded'", runs["fine"]) == 20

    await wait_for(fine_done, timeout=10)
    assert len(agent_server.of("hang")) == 2 and agent_server.peak["hang"] == 2  # its cap, never more
    assert agent_server.peak["fine"] <= 2
    release.set()
    await pusher.stop(deadline=10)


async def test_the_push_loop_claims_for_a_busy_agent_once_enough_slots_are_free_or_it_waited(wctx, agent_server):
    # A claim's fixed cost is most of what a queued task costs: with 1 of 8 slots free the loop waits for a
    # quarter of them (2), at most CLAIM_WAIT_S; with more free it claims at once.
    release = asyncio.Event()

    async def most_hang(n, hit):
        if n < 7:
            await release.wait()
        return JSONResponse({"ok": True})

    agent_server.behaviours["a"] = most_hang
    _w, agent, ap, trigger = await _world(wctx, agent_server, max_concurrency=8, timeout_s=30)
    assert claim_floor(8) == 2
    async with wctx.pool.acquire() as conn:
        for _ in range(12):
            await add_delivery(conn, ap, trigger)
    pusher = Pusher(wctx, holder="t1")
    pushes = PushWorker(wctx, holder="t1", pusher=pusher)
    try:
        await DeliveryWorker(wctx, holder="t1", pusher=pusher).run_once()  # 8 born claimed: 7 hang, 1 ends
        async with wctx.pool.acquire() as conn:
            await wait_for(lambda: _succeeded(conn, 1))
            assert await pushes.run_once() == 0 and agent.row["id"] in pushes.waiting  # 1 free of 8: it waits
            await asyncio.sleep(CLAIM_WAIT_S)
            assert await pushes.run_once() == 1 and not pushes.waiting  # waited long enough
            await wait_for(lambda: _succeeded(conn, 2))
            assert await pushes.run_once() == 0 and agent.row["id"] in pushes.waiting
            release.set()
            await wait_for(lambda: _succeeded(conn, 9))
            assert await pushes.run_once() == 3  # 8 free: the rest at once
            await wait_for(lambda: _succeeded(conn, 12))
    finally:
        release.set()
        await pusher.stop(deadline=5)


async def test_a_flush_waits_for_pushes_still_in_flight_but_not_when_none_is(wctx, agent_server):
    # Two pushes, the second answered 0.3 s after the first: one flush writes both (it waits for the one still in
    # flight, here up to 1 s). A push alone is written at once, without that wait.
    async def second_later(n, hit):
        if n == 1:
            await asyncio.sleep(0.3)
        return JSONResponse({"ok": True})

    agent_server.behaviours["a"] = second_later
    _w, _agent, ap, trigger = await _world(wctx, agent_server)
    async with wctx.pool.acquire() as conn:
        for _ in range(2):
            await add_delivery(conn, ap, trigger)
    pusher = _GroupingPusher(wctx, holder="t1")
    pusher.flush_gather_s = 1.0
    deliveries = DeliveryWorker(wctx, holder="t1", pusher=pusher)
    try:
        assert await deliveries.run_once() == 2
        async with wctx.pool.acquire() as conn:
            await wait_for(lambda: _succeeded(conn, 2), timeout=10)
        assert pusher.groups == [2]
        async with wctx.pool.acquire() as conn:
            await add_delivery(conn, ap, trigger)
        started = time.monotonic()
        assert await deliveries.run_once() == 1
        async with wctx.pool.acquire() as conn:
            await wait_for(lambda: _succeeded(conn, 3), timeout=10, every=0.01)
        assert time.monotonic() - started < 0.9 and pusher.groups == [2, 1]
    finally:
        await pusher.stop(deadline=5)


class _GroupingPusher(Pusher):
    """The real pusher, recording the size of each flush group."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.groups = []

    async def _write_attempts(self, conn, group):
        self.groups.append(len(group))
        return await super()._write_attempts(conn, group)


async def test_stop_releases_pushes_still_in_flight_after_the_deadline(wctx, agent_server):
    async def hang(n, hit):
        await asyncio.sleep(30)
        return Response(status_code=200)

    agent_server.behaviours["a"] = hang
    _w, _agent, ap, trigger = await _world(wctx, agent_server, timeout_s=60)
    run_id, pusher = await _taken(wctx, ap, trigger)
    await wait_for(lambda: len(agent_server.of("a")) == 1)
    await pusher.stop(deadline=0.2)
    async with wctx.pool.acquire() as conn:
        task = await _task(conn, run_id)
        audit = await conn.fetchval("SELECT detail->>'reason' FROM audit_log WHERE action='RELEASE' "
                                    "AND subject_id = $1", str(task["id"]))
    assert task["status"] == "queued" and task["lease_token"] is None and audit == "shutdown"


async def test_dispatch_without_a_pusher_leaves_the_task_queued_and_notifies(wctx, agent_server):
    _w, _agent, ap, trigger = await _world(wctx, agent_server)
    heard: list[str] = []
    listener = await database.connect(wctx.dsn)
    try:
        await listener.add_listener("hookgate_tasks", lambda *a: heard.append(a[3]))
        async with wctx.pool.acquire() as conn:
            _, run_id = await add_delivery(conn, ap, trigger)
            result = await dispatch.dispatch_run(conn, run_id, dispatch.Options(heartbeat_timeout_s=120.0))
        await wait_for(lambda: bool(heard))
    finally:
        await listener.close()
    assert result.status == "queued" and result.claimed is None
    assert heard == [str(result.task_id)]


def _first_push_waits(agent_server, name):
    """Agent ``name`` holds its first push until the returned event is set, and answers the others at once."""
    release = asyncio.Event()

    async def first_waits(n, hit):
        if n == 0:
            await release.wait()
        return JSONResponse({"ok": True})

    agent_server.behaviours[name] = first_waits
    return release


async def test_a_finished_push_wakes_the_pushes_loop_only_while_tasks_wait(db_url, agent_server):
    # A poll far longer than the test: only a wake-up can push the waiting task in time.
    async with open_context(make_settings(db_url, **(FAST | {"worker_poll_s": 30.0})), migrate=False) as ctx:
        release = _first_push_waits(agent_server, "a")
        _w, _agent, ap, trigger = await _world(ctx, agent_server, max_concurrency=1)
        async with push_loop(ctx, deadline=5, loop=_CountingPushWorker) as (pusher, pushes, wake):
            deliveries = DeliveryWorker(ctx, holder="t1", pusher=pusher, wake=wake)
            async with ctx.pool.acquire() as conn:
                for _ in range(2):
                    await add_delivery(conn, ap, trigger)
            await deliveries.run_once()  # one pushed (the cap), one queued and announced
            await wait_for(lambda: len(agent_server.of("a")) == 1 and pusher.backlog)
            release.set()  # the slot frees: the waiting task is pushed at once, not at the next poll
            await wait_for(lambda: len(agent_server.of("a")) == 2, timeout=5)
            async with ctx.pool.acquire() as conn:
                await wait_for(lambda: _succeeded(conn, 2), timeout=5)
            await asyncio.sleep(0.2)  # the last completion's wake-up pass found nothing waiting
            assert not pusher.backlog
            async with ctx.pool.acquire() as conn:
                await add_delivery(conn, ap, trigger)
            passes = pushes.passes
            await deliveries.run_once()  # pushed at once: nothing waits
            async with ctx.pool.acquire() as conn:
                await wait_for(lambda: _succeeded(conn, 3), timeout=5)
            await asyncio.sleep(0.2)
            assert pushes.passes == passes  # the finished push cost no lookup


async def test_a_push_that_finishes_while_a_pass_looks_up_due_work_still_wakes_the_pushes_loop(db_url, agent_server):
    # The pass clears nothing before its lookup answers: a push finishing meanwhile (its slot freed after the
    # lookup's snapshot) pokes the loop, or the waiting task would wait for the next poll.
    settings = make_settings(db_url, **(FAST | {"worker_poll_s": 30.0}))
    async with open_context(settings, migrate=False) as ctx, open_context(settings, migrate=False) as lookups:
        release = _first_push_waits(agent_server, "a")
        _w, _agent, ap, trigger = await _world(ctx, agent_server, max_concurrency=1)
        wake = NotifyListener(ctx.dsn)
        await wake.ensure()
        pusher = Pusher(ctx, holder="t1", wake=wake)
        # The loop's pass reads from its own pool, which the test holds: the pass waits inside, as if its lookup
        # were slow, while the pusher's flush writes through the other pool.
        pushes = PushWorker(lookups, holder="t1", pusher=pusher, wake=wake)
        held = [await lookups.pool.acquire() for _ in range(settings.pool_max_size)]
        try:
            async with ctx.pool.acquire() as conn:
                for _ in range(2):
                    await add_delivery(conn, ap, trigger)
            await DeliveryWorker(ctx, holder="t1", pusher=pusher, wake=wake).run_once()  # one pushed, one queued
            await wait_for(lambda: len(agent_server.of("a")) == 1 and pusher.notices > 0)
            assert await wake.wait(notify.TASKS, 0.01)  # the queued task's notice, consumed
            looking = asyncio.create_task(pushes.run_once())
            await asyncio.sleep(0.05)
            assert not looking.done()  # the pass is in, waiting for a connection
            release.set()  # the first push finishes and frees the slot meanwhile
            async with ctx.pool.acquire() as conn:
                await wait_for(lambda: _succeeded(conn, 1), timeout=5)
            await wait_for(lambda: wake.events[notify.TASKS].is_set(), timeout=2)  # the next pass comes at once
            assert not looking.done()
        finally:
            for conn in held:
                await lookups.pool.release(conn)
            await asyncio.wait_for(looking, 5)
            await pusher.stop(deadline=5)
            await wake.close()


class _CountingPushWorker(PushWorker):
    """The real push loop, counting its passes."""

    passes = 0

    async def run_once(self, now=None):
        self.passes += 1
        return await super().run_once(now)


async def _succeeded(conn, count):
    return await conn.fetchval("SELECT count(*) FROM agent_task WHERE status = 'succeeded'") == count
