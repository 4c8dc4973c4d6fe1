"""Alerts end to end: events raised where they happen reach real local receivers, signed and verified.

Receivers are real HTTP servers on loopback (``agent_server``); every notification they get is verified with
the ``standardwebhooks`` reference library against the channel's secret as the API showed it once. The sender
is the worker's real ``AlertSender`` with a short retry schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from autopilot import admission, alerts, dispatch, tasks
from hookgate import notify
from hookgate.context import Context, open_context
from scheduler.maintenance import jobs as maintenance_jobs
from scheduler.maintenance import rejection_spikes
from scheduler.maintenance.auto_pause import auto_pause_job
from scheduler.maintenance.retention import retention_job
from scheduler.manager import Scheduler, SchedulerConfig
from scheduler.spec import Every
from sql import Q
from tests import factories
from tests.conftest import make_settings
from tests.processes import free_port
from tests.servers import serving_app
from tests.worker.conftest import AgentServer, Hit, add_delivery, agent_world, answer, wait_for
from worker import role
from worker.alerts import AlertSender, Leased, Outcome
from worker.deliveries import DeliveryWorker
from worker.push import Pusher, PushWorker

#: Retries in tenths of a second, so a receiver that is down for a moment is tried again within the test.
SHORT = {"push_retry_schedule": "0.2s,0.2s,0.3s", "worker_poll_s": 0.05}


@pytest.fixture
async def actx(db_url: str) -> AsyncIterator[Context]:
    """The sender's context: the short retry schedule, loopback receivers allowed."""
    async with open_context(make_settings(db_url, **SHORT), migrate=False) as context:
        yield context


@contextlib.asynccontextmanager
async def sending(ctx: Context, n: int = 1) -> AsyncIterator[list[AlertSender]]:
    """``n`` alert senders running as services (each its own loop, as in separate worker processes)."""
    senders = [AlertSender(ctx) for _ in range(n)]
    loops = [asyncio.create_task(s.run()) for s in senders]
    try:
        yield senders
    finally:
        for s in senders:
            await s.stop()
        await asyncio.gather(*loops)


async def channel(client: httpx.AsyncClient, w: factories.World, url: str, events: list[str] | None = None,
                  ) -> dict[str, Any]:
    """A channel made through the admin API (the secret is in this answer only)."""
    made = await client.post("/v1/notification-channels", headers=w.auth,
                             json={"name": "ops", "url": url, "events": events or list(alerts.EVENTS)})
    assert made.status_code == 201, made.text
    return dict(made.json())


def verified(hit: Hit, secret: str) -> dict[str, Any]:
    """The notification body, verified with the Standard Webhooks reference library (raises if forged)."""
    body: dict[str, Any] = Webhook(secret).verify(hit.raw, hit.headers)
    return body


async def hits(server: AgentServer, name: str, count: int) -> list[Hit]:
    """Wait until the receiver ``name`` got ``count`` requests; returns them."""
    await wait_for(lambda: len(server.of(name)) >= count, timeout=15)
    return server.of(name)


async def _failed_task(ctx: Context, s: factories.Small, report: tasks.Report) -> Any:
    """Start an api run of ``s``'s autopilot; its agent claims the task and reports ``report``. The run's id."""
    async with ctx.pool.acquire() as conn:
        adm = await admission.admit(conn, autopilot_id=s.autopilot["id"], source="api", payload={},
                                    heartbeat_timeout_s=120.0)
        done = await dispatch.dispatch_run(conn, adm.run_id, dispatch.Options(heartbeat_timeout_s=120.0))
        [held] = await tasks.claim(conn, agent_id=s.agent.row["id"], lease_s=60, holder="h", actor_type="runtime")
        await tasks.report(conn, done.task_id, held.lease_token, report, actor_type="runtime", actor_id="h")
    return adm.run_id


async def _status(ctx: Context, notification_id: Any) -> Any:
    async with ctx.pool.acquire() as conn:
        return await conn.fetchrow("SELECT * FROM notification WHERE id = $1::uuid", notification_id)


# --- the events, each from where it happens --------------------------------------------------------------------


async def test_a_ping_from_the_test_endpoint_reaches_the_receiver_signed_and_verifiable(actx, client, agent_server):
    w = await factories.world(actx)
    made = await channel(client, w, agent_server.url("ops"))
    answer = await client.post(f"/v1/notification-channels/{made['id']}/test", headers=w.auth)
    assert answer.status_code == 202, answer.text
    notification_id = answer.json()["notification_id"]
    async with sending(actx):
        [hit] = await hits(agent_server, "ops", 1)
        await wait_for(lambda: _is(actx, notification_id, "sent"))
    body = verified(hit, made["signing_secret"])
    assert hit.headers["webhook-id"] == notification_id
    assert body["type"] == "ping" and body["data"]["channel_id"] == made["id"]
    assert set(body) == {"type", "timestamp", "data"}
    row = await _status(actx, notification_id)
    assert (row["status"], row["attempt"], row["response_status"]) == ("sent", 1, 200)


async def _is(ctx: Context, notification_id: Any, status: str) -> bool:
    row = await _status(ctx, notification_id)
    return row is not None and row["status"] == status


async def test_a_run_failing_for_good_raises_run_failed(actx, client, agent_server):
    s = await factories.small(actx, title="nightly")
    made = await channel(client, s.world, agent_server.url("ops"), ["run.failed"])
    run_id = await _failed_task(actx, s, tasks.Report("failed", error="boom", retry_class="permanent"))
    async with sending(actx):
        [hit] = await hits(agent_server, "ops", 1)
    body = verified(hit, made["signing_secret"])
    assert body["type"] == "run.failed"
    assert body["data"] | {"finished_at": None} == {
        "run_id": str(run_id), "autopilot_id": str(s.autopilot["id"]), "trigger_id": None, "source": "api",
        "reason_code": "task_failed", "reason": "boom", "finished_at": None}


async def test_a_retryable_failure_with_attempts_left_raises_nothing(actx, client, agent_server):
    s = await factories.small(actx)
    await channel(client, s.world, agent_server.url("ops"), ["run.failed"])
    await _failed_task(actx, s, tasks.Report("failed", error="busy", retry_class="transient", retry_after_s=1.0))
    assert await actx.pool.fetchval("SELECT count(*) FROM notification") == 0


async def test_the_automatic_pause_raises_autopilot_paused(actx, client, agent_server):
    s = await factories.small(actx, title="flaky")
    made = await channel(client, s.world, agent_server.url("ops"), ["autopilot.paused"])
    await actx.pool.execute(
        """INSERT INTO autopilot_run (workspace_id, autopilot_id, source, status, finished_at)
           SELECT $1, $2, 'api', 'failed', now() FROM generate_series(1, 50)""", s.world.workspace_id,
        s.autopilot["id"])
    await Scheduler(actx.pool, [auto_pause_job()], SchedulerConfig()).run_once()
    async with sending(actx):
        [hit] = await hits(agent_server, "ops", 1)
    body = verified(hit, made["signing_secret"])
    assert body["type"] == "autopilot.paused"
    assert body["data"]["autopilot_id"] == str(s.autopilot["id"]) and body["data"]["title"] == "flaky"
    assert (body["data"]["reason"], body["data"]["failed_runs"]) == ("auto_pause", 50)


async def test_an_agents_circuit_opening_and_closing_raises_unhealthy_then_recovered(db_url, client, agent_server):
    """Real pushes to an agent that fails, then answers: the push worker's health changes raise both alerts."""
    down = True

    async def flaky(_n: int, _hit: Hit) -> Response:
        return Response(status_code=503) if down else JSONResponse({"ok": True})

    agent_server.behaviours["a"] = flaky
    settings = SHORT | {"agent_trip_after": 2, "agent_probe_min_s": 0.2, "agent_probe_max_s": 0.4}
    async with open_context(make_settings(db_url, **settings), migrate=False) as ctx:
        s = await agent_world(ctx, agent_server.url("a"), name="a")
        made = await channel(client, s.world, agent_server.url("ops"), ["agent.unhealthy", "agent.recovered"])
        async with ctx.pool.acquire() as conn:
            for _ in range(3):
                await add_delivery(conn, s.autopilot, s.trigger)
        pusher = Pusher(ctx, holder="w1")
        deliveries = DeliveryWorker(ctx, holder="w1", pusher=pusher)
        pushes = PushWorker(ctx, holder="w1", pusher=pusher)

        async def pass_until(hit_count: int) -> bool:
            await deliveries.run_once()
            await pushes.run_once()
            return len(agent_server.of("ops")) >= hit_count

        async with sending(ctx):
            await wait_for(lambda: pass_until(1), timeout=15)
            down = False
            await wait_for(lambda: pass_until(2), timeout=15)
        await pusher.stop(deadline=5)
    unhealthy, recovered = (verified(h, made["signing_secret"]) for h in agent_server.of("ops"))
    assert (unhealthy["type"], recovered["type"]) == ("agent.unhealthy", "agent.recovered")
    assert unhealthy["data"]["agent_id"] == recovered["data"]["agent_id"] == str(s.agent.row["id"])
    assert unhealthy["data"]["state"] == "unhealthy" and unhealthy["data"]["failures"] >= 2
    assert unhealthy["data"]["last_error"] == "agent answered 503" and unhealthy["data"]["next_probe_at"]
    assert (recovered["data"]["state"], recovered["data"]["failures"]) == ("healthy", 0)


async def test_emit_queues_one_notification_per_channel_hearing_the_event_and_none_when_rolled_back(
        actx, client, agent_server):
    w = await factories.world(actx)
    other = await factories.world(actx, "globex")
    await channel(client, w, agent_server.url("a"), ["run.failed", "agent.unhealthy"])
    await channel(client, w, agent_server.url("b"), ["agent.unhealthy"])
    await channel(client, other, agent_server.url("c"), ["agent.unhealthy"])
    heard: list[str] = []
    listener = await asyncpg.connect(actx.dsn)
    await listener.add_listener(notify.ALERTS, lambda *a: heard.append(a[3]))
    async with actx.pool.acquire() as conn:
        assert await alerts.emit(conn, w.workspace_id, "agent.unhealthy", {}) == 2
        await wait_for(lambda: bool(heard))  # the sender is woken, not left to its poll
        assert heard[0] in {str(r["id"]) for r in await conn.fetch("SELECT id FROM notification")}
        assert await alerts.emit(conn, w.workspace_id, "autopilot.paused", {}) == 0
        with contextlib.suppress(RuntimeError):
            async with conn.transaction():
                await alerts.emit(conn, w.workspace_id, "run.failed", {})
                raise RuntimeError("the caller's change failed")
        assert await conn.fetchval("SELECT count(*) FROM notification") == 2
        with pytest.raises(ValueError):
            await alerts.emit(conn, w.workspace_id, "run.exploded", {})
    await listener.close()
    assert len(heard) == 1  # nothing for an event no channel hears, nor for a rolled-back one


# --- trigger.rejections_spike ---------------------------------------------------------------------------------


async def _rejected(conn: Any, trigger: Any, count: int, at: Any) -> None:
    await conn.execute(
        """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, received_at, provider, event,
                                         signature_status, status, reason_code)
           SELECT $1, $2, $3, $5::timestamptz - g * interval '1 second', 'generic', 'e', 'invalid', 'rejected',
                  'signature_invalid'
           FROM generate_series(0, $4 - 1) g""",
        trigger["workspace_id"], trigger["id"], trigger["autopilot_id"], count, at)


async def test_twenty_rejections_in_five_minutes_raise_one_spike_nineteen_none_and_never_twice(
        actx, client, agent_server):
    s = await factories.small(actx)
    made = await channel(client, s.world, agent_server.url("ops"), ["trigger.rejections_spike"])
    spiked = s.trigger
    quiet, _ = await factories.webhook_trigger(s.world, s.autopilot)
    async with actx.pool.acquire() as conn:
        now = await conn.fetchval("SELECT now()")
        await _rejected(conn, spiked, 20, now)
        await _rejected(conn, quiet, 19, now)
        # Old rejections (before the window) do not count.
        await _rejected(conn, quiet, 5, now - timedelta(minutes=6))
        assert await rejection_spikes.raise_spikes(conn, now) == [str(spiked["id"])]
        # The next minutes' runs (and a second scheduler at once) find the spike raised already.
        again = await asyncio.gather(*(_raise(actx, now + timedelta(minutes=m)) for m in (0, 1, 1, 2, 4)))
        assert again == [[]] * 5
        assert await conn.fetchval("SELECT count(*) FROM notification") == 1
        # A new window with a new flood raises it again, once.
        await _rejected(conn, spiked, 20, now + timedelta(minutes=5, seconds=30))
        assert await rejection_spikes.raise_spikes(conn, now + timedelta(minutes=5, seconds=30)) == [str(spiked["id"])]
    async with sending(actx):
        found = await hits(agent_server, "ops", 2)
    bodies = [verified(h, made["signing_secret"]) for h in found]
    assert {b["type"] for b in bodies} == {"trigger.rejections_spike"}
    assert [b["data"]["trigger_id"] for b in bodies] == [str(spiked["id"])] * 2
    assert [b["data"]["rejected"] for b in bodies] == [20, 20]


async def _raise(ctx: Context, now: Any) -> list[str]:
    async with ctx.pool.acquire() as conn:
        return await rejection_spikes.raise_spikes(conn, now)


async def test_concurrent_spike_checks_raise_a_spike_once(actx, client, agent_server):
    s = await factories.small(actx)
    await channel(client, s.world, agent_server.url("ops"), ["trigger.rejections_spike"])
    async with actx.pool.acquire() as conn:
        now = await conn.fetchval("SELECT now()")
        await _rejected(conn, s.trigger, 25, now)
    raised = await asyncio.gather(*(_raise(actx, now) for _ in range(6)))
    assert sorted(raised) == [[]] * 5 + [[str(s.trigger["id"])]]


def test_the_spike_check_is_a_maintenance_job_running_every_minute(actx):
    [job] = [j for j in maintenance_jobs(actx.settings) if j.name == "rejection_spikes"]
    assert job.cadence == Every(timedelta(minutes=1))


# --- durability: retries, leases, concurrency ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def receiver_on(port: int, got: list[Hit]) -> AsyncIterator[None]:
    """A receiver listening on ``port`` from now until the block ends."""

    async def handle(request: Any) -> Response:
        got.append(Hit("late", dict(request.headers), await request.body()))
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/hook", handle, methods=["POST"])])
    async with serving_app(app, port):
        yield


async def test_a_receiver_that_is_down_then_up_gets_the_notification_later(actx, client):
    w = await factories.world(actx)
    port = free_port()
    made = await channel(client, w, f"http://127.0.0.1:{port}/hook")
    notification_id = (await client.post(f"/v1/notification-channels/{made['id']}/test", headers=w.auth)
                       ).json()["notification_id"]
    got: list[Hit] = []
    async with sending(actx):
        await wait_for(lambda: _attempted(actx, notification_id, 2))  # refused twice: nobody listens
        row = await _status(actx, notification_id)
        assert row["status"] in ("queued", "sending") and "unreachable" in row["last_error"]
        async with receiver_on(port, got):
            await wait_for(lambda: _is(actx, notification_id, "sent"))
    [hit] = got
    assert verified(hit, made["signing_secret"])["type"] == "ping"
    assert hit.headers["webhook-id"] == notification_id


async def _attempted(ctx: Context, notification_id: Any, attempts: int) -> bool:
    row = await _status(ctx, notification_id)
    return row["attempt"] >= attempts and row["status"] == "queued"


async def test_a_receiver_failing_past_the_schedule_fails_the_notification_and_a_400_fails_it_at_once(
        actx, client, agent_server):
    agent_server.behaviours |= {"down": answer(JSONResponse({}, status_code=503)),
                                "refuses": answer(JSONResponse({}, status_code=400))}
    w = await factories.world(actx)
    ids = []
    for name in ("down", "refuses"):
        made = await channel(client, w, agent_server.url(name))
        ids.append((await client.post(f"/v1/notification-channels/{made['id']}/test", headers=w.auth)
                    ).json()["notification_id"])
    async with sending(actx):
        for notification_id in ids:
            await wait_for(lambda nid=notification_id: _is(actx, nid, "failed"))
    down_row, refused_row = [await _status(actx, i) for i in ids]
    assert (down_row["attempt"], down_row["response_status"]) == (4, 503)  # 3 delays: 4 attempts
    assert len(agent_server.of("down")) == 4
    assert (refused_row["attempt"], refused_row["response_status"]) == (1, 400)
    assert down_row["finished_at"] is not None


async def test_two_senders_racing_never_send_one_notification_twice(actx, client, agent_server):
    async def slow(_n: int, _hit: Hit) -> Response:
        await asyncio.sleep(0.01)
        return JSONResponse({})

    agent_server.behaviours["ops"] = slow
    w = await factories.world(actx)
    await channel(client, w, agent_server.url("ops"), ["agent.unhealthy"])
    async with actx.pool.acquire() as conn, conn.transaction():
        for i in range(60):
            await alerts.emit(conn, w.workspace_id, "agent.unhealthy", {"n": i})
    async with sending(actx, n=2) as senders:
        await hits(agent_server, "ops", 60)
        await wait_for(lambda: _all_sent(actx))
        assert all(s.sent for s in senders), [s.sent for s in senders]  # both took part
    ids = [h.headers["webhook-id"] for h in agent_server.of("ops")]
    assert len(ids) == len(set(ids)) == 60


async def _all_sent(ctx: Context) -> bool:
    async with ctx.pool.acquire() as conn:
        return bool(await conn.fetchval("SELECT bool_and(status = 'sent') FROM notification"))


async def test_a_stale_lease_holders_late_outcome_changes_nothing(actx, client, agent_server):
    w = await factories.world(actx)
    await channel(client, w, agent_server.url("ops"), ["agent.unhealthy"])
    async with actx.pool.acquire() as conn:
        await alerts.emit(conn, w.workspace_id, "agent.unhealthy", {})
        now = await conn.fetchval("SELECT now()")
    stale, fresh = AlertSender(actx), AlertSender(actx)
    [first] = await _claim(actx, now)
    [second] = await _claim(actx, now + timedelta(minutes=5))  # the first lease ran out: taken over
    assert (first.id, first.attempt, second.attempt) == (second.id, 1, 2)
    assert await fresh.send(second) == "sent"
    await fresh.close()
    assert await stale._record(first, Outcome("failed", 500, "late")) == "lost"
    row = await _status(actx, first.id)
    assert (row["status"], row["attempt"], row["last_error"]) == ("sent", 2, None)
    assert len(agent_server.of("ops")) == 1


async def _claim(ctx: Context, now: Any) -> list[Leased]:
    async with ctx.pool.acquire() as conn:
        rows = await conn.fetch(Q.notification_claim, 16, 30.0, now)
    return [Leased(**{k: r[k] for k in Leased.__dataclass_fields__}) for r in rows]


async def test_an_address_the_egress_policy_refuses_at_send_time_fails_without_a_request(db_url, actx, client,
                                                                                          agent_server):
    w = await factories.world(actx)
    made = await channel(client, w, agent_server.url("ops"))
    notification_id = (await client.post(f"/v1/notification-channels/{made['id']}/test", headers=w.auth)
                       ).json()["notification_id"]
    # A sender with the default policy (no loopback allowed): the connect-time check refuses the socket.
    async with open_context(make_settings(db_url, agent_allow_cidrs=None, **SHORT), migrate=False) as strict:
        async with sending(strict):
            await wait_for(lambda: _is(actx, notification_id, "failed"))
    row = await _status(actx, notification_id)
    assert row["last_error"].startswith("egress_forbidden") and row["attempt"] == 1
    assert agent_server.of("ops") == []


async def test_deleting_a_channel_drops_its_queued_notifications(actx, client, agent_server):
    w = await factories.world(actx)
    made = await channel(client, w, agent_server.url("ops"))
    await client.post(f"/v1/notification-channels/{made['id']}/test", headers=w.auth)
    gone = await client.delete(f"/v1/notification-channels/{made['id']}", headers=w.auth)
    assert gone.status_code == 200, gone.text
    async with actx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM notification") == 0
    async with sending(actx):
        await asyncio.sleep(0.3)
    assert agent_server.of("ops") == []


def test_the_worker_role_runs_the_alert_sender(actx):
    assert any(isinstance(s, AlertSender) for s in role.services(actx))


async def test_retention_deletes_old_sent_and_failed_notifications_and_keeps_the_rest(actx, client, agent_server):
    w = await factories.world(actx)
    await channel(client, w, agent_server.url("ops"), ["agent.unhealthy"])
    async with actx.pool.acquire() as conn:
        for _ in range(5):
            await alerts.emit(conn, w.workspace_id, "agent.unhealthy", {})
        await conn.execute(
            """UPDATE notification SET status = s.status, finished_at = now() - s.age * interval '1 day'
               FROM (SELECT id, (ARRAY['sent', 'failed', 'sent', 'sent'])[row_number() OVER (ORDER BY id)] AS status,
                            (ARRAY[40, 40, 40, 1])[row_number() OVER (ORDER BY id)] AS age
                     FROM notification) s
               WHERE notification.id = s.id AND s.status IS NOT NULL""")
    await Scheduler(actx.pool, [retention_job(timedelta(days=30), batch_size=2)], SchedulerConfig()).run_once()
    async with actx.pool.acquire() as conn:
        left = sorted(r["status"] for r in await conn.fetch("SELECT status FROM notification"))
        result = await conn.fetchval("SELECT result FROM sys_cron_executions WHERE job_name = 'retention'")
    assert left == ["queued", "sent"] and result["notifications_deleted"] == 3
