"""HOOKGATE_WORKSPACE_MAX_QUEUED: ingress refuses a workspace's webhooks (429) while it has that many waiting runs."""

import asyncio

import pytest

from gateway.ingress import quota
from gateway.ingress.endpoint import ingress_state
from tests.gateway import ingress_kit as kit

pytestmark = pytest.mark.asyncio


async def _post(http, h: kit.Hook, n: int):
    return await kit.post_github(http, h, {"action": "opened", "issue": {"number": n}})


async def _next_refresh() -> None:
    """Past the gateway's refresh interval: the next request reads the list of full workspaces again."""
    await asyncio.sleep(quota.REFRESH_S + 0.1)


async def test_a_workspace_at_its_limit_gets_429_with_retry_after_and_a_rejected_row_until_it_drains(db_url):
    async with kit.app_client(db_url, workspace_max_queued=5) as (ctx, http):
        h = await kit.hook(ctx)
        other = await kit.hook(ctx, workspace="other")
        accepted = [await _post(http, h, n) for n in range(5)]
        assert [r.status_code for r in accepted] == [200] * 5
        await _next_refresh()
        refused = await _post(http, h, 6)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "30"
        body = refused.json()
        assert (body["status"], body["error"], body["reason"]) == ("rejected", "workspace_queue_full",
                                                                    "workspace_queue_full")
        assert (await _post(http, other, 1)).status_code == 200  # another workspace is not limited
        async with ctx.pool.acquire() as conn:
            row = await conn.fetchrow("SELECT * FROM webhook_delivery WHERE id = $1", body["delivery_id"])
            runs = await conn.fetchval("SELECT count(*) FROM autopilot_run WHERE workspace_id = $1",
                                       h.w.workspace_id)
            assert (row["status"], row["reason_code"], row["response_status"], row["run_id"]) == (
                "rejected", "workspace_queue_full", 429, None)
            assert row["signature_status"] == "valid" and runs == 5  # the refused event made no run
            # One run finishes and one starts: three waiting, under the limit again.
            [done, started] = await conn.fetchval("SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM autopilot_run "
                                                  "WHERE workspace_id = $1 ORDER BY id LIMIT 2) r", h.w.workspace_id)
            await conn.execute("UPDATE autopilot_run SET status = 'completed', finished_at = now() WHERE id = $1", done)
            await conn.execute("UPDATE autopilot_run SET status = 'running' WHERE id = $1", started)
        await _next_refresh()
        again = await _post(http, h, 7)
        assert again.status_code == 200 and again.json()["status"] == "accepted"
        assert "retry-after" not in again.headers


async def test_a_refusal_is_not_charged_as_a_bad_credential(db_url):
    async with kit.app_client(db_url, workspace_max_queued=1, ip_bad_credential_cap=1) as (ctx, http):
        h = await kit.hook(ctx)
        assert (await _post(http, h, 1)).status_code == 200
        await _next_refresh()
        assert [(await _post(http, h, n)).status_code for n in range(2, 5)] == [429, 429, 429]


async def test_without_the_limit_nothing_is_refused_or_read(db_url):
    async with kit.app_client(db_url) as (ctx, http):
        h = await kit.hook(ctx)
        first = [await _post(http, h, n) for n in range(6)]
        await _next_refresh()
        later = [await _post(http, h, n) for n in range(6, 8)]
        state = ingress_state(http._transport.app)  # type: ignore[attr-defined]
    assert [r.status_code for r in first + later] == [200] * 8
    assert state.queues.limit == 0 and state.queues._read_at == float("-inf")  # never queried
