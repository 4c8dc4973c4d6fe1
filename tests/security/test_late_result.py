"""An unauthenticated write costs nothing lasting.

A wrong-lease report for an HTTP agent's task is 409, its LATE_RESULT row keeps only the size and SHA-256
of what was sent, under an anonymous actor, and it charges the caller's bad-credential debt until 429.
"""

from __future__ import annotations

import hashlib
import json

from tests import factories
from tests.gateway import ingress_kit as kit

SECRET_TEXT = "do-not-keep-this-" + "z" * 20
WRONG = "00000000-0000-4000-8000-000000000000"


async def _late_rows(conn, task_id):
    return await conn.fetch("SELECT * FROM audit_log WHERE action = 'LATE_RESULT' AND subject_id = $1 ORDER BY id",
                            task_id)


async def test_a_wrong_lease_report_keeps_only_size_and_digest_under_an_anonymous_actor(ctx, conn, client):
    task_id, _, _ = await factories.claimed_http_task(ctx, conn)
    raw = json.dumps({"lease_token": WRONG, "status": "failed", "result": {"note": SECRET_TEXT},
                      "error": SECRET_TEXT, "retry_class": SECRET_TEXT}).encode()
    answer = await client.post(f"/v1/runtime/tasks/{task_id}/report", content=raw)
    assert answer.status_code == 409 and answer.json()["error"] == "lease_lost"
    [row] = await _late_rows(conn, task_id)
    assert row["actor_type"] == "anonymous" and row["actor_id"] is None
    assert row["detail"] == {"op": "report", "task_status": "running", "size": len(raw),
                             "sha256": hashlib.sha256(raw).hexdigest()}
    assert SECRET_TEXT not in json.dumps(row["detail"])


async def test_a_wrong_lease_renew_keeps_only_size_and_digest_under_an_anonymous_actor(ctx, conn, client):
    task_id, _, _ = await factories.claimed_http_task(ctx, conn)
    raw = json.dumps({"lease_token": WRONG, "instance": SECRET_TEXT}).encode()
    answer = await client.post(f"/v1/runtime/tasks/{task_id}/renew", content=raw)
    assert answer.status_code == 409 and answer.json()["error"] == "lease_lost"
    [row] = await _late_rows(conn, task_id)
    assert (row["actor_type"], row["actor_id"]) == ("anonymous", None)
    assert row["detail"] == {"op": "renew", "task_status": "running", "size": len(raw),
                             "sha256": hashlib.sha256(raw).hexdigest()}


async def test_the_holders_report_without_a_bearer_is_still_applied_and_attributed_to_the_agent(ctx, conn, client):
    task_id, lease, agent_id = await factories.claimed_http_task(ctx, conn)
    answer = await client.post(f"/v1/runtime/tasks/{task_id}/report",
                               json={"lease_token": lease, "status": "succeeded"})
    assert answer.status_code == 200 and answer.json()["applied"] is True
    release = await conn.fetchrow("SELECT * FROM audit_log WHERE action = 'RELEASE' AND subject_id = $1", task_id)
    assert (release["actor_type"], release["actor_id"]) == ("agent", agent_id)


async def test_wrong_lease_reports_without_a_runtime_token_charge_the_debt_until_429(db_url):
    async with kit.app_client(db_url, ip_bad_credential_cap=5) as (ctx, client):
        async with ctx.pool.acquire() as conn:
            task_id, lease, _ = await factories.claimed_http_task(ctx, conn)
        url = f"/v1/runtime/tasks/{task_id}/report"
        for n in range(5):
            refused = await client.post(url, json={"lease_token": WRONG, "status": "succeeded"})
            assert refused.status_code == 409, n
        blocked = await client.post(url, json={"lease_token": WRONG, "status": "succeeded"})
        assert blocked.status_code == 429 and blocked.json()["error"] == "rate_limited"
        assert int(blocked.headers["retry-after"]) >= 1
        right = await client.post(url, json={"lease_token": lease, "status": "succeeded"})
        assert right.status_code == 429  # the address is in debt, whatever it sends now
        raw, headers = kit.github({"action": "opened"})
        assert (await client.post("/hooks/awt_" + "x" * 43, content=raw, headers=headers)).status_code == 429
        async with ctx.pool.acquire() as conn:
            assert len(await _late_rows(conn, task_id)) == 5  # the blocked ones wrote nothing


async def test_wrong_lease_renews_charge_the_debt_too(db_url):
    async with kit.app_client(db_url, ip_bad_credential_cap=3) as (ctx, client):
        async with ctx.pool.acquire() as conn:
            task_id, _, _ = await factories.claimed_http_task(ctx, conn)
        for _ in range(3):
            assert (await client.post(f"/v1/runtime/tasks/{task_id}/renew",
                                      json={"lease_token": WRONG})).status_code == 409
        blocked = await client.post(f"/v1/runtime/tasks/{task_id}/renew", json={"lease_token": WRONG})
        assert blocked.status_code == 429 and blocked.json()["error"] == "rate_limited"


async def test_a_pull_runtime_with_its_token_is_not_charged_for_a_stale_lease(db_url):
    async with kit.app_client(db_url, ip_bad_credential_cap=2) as (ctx, client):
        w = await factories.world(ctx)
        agent = await factories.pull_agent(w)
        ap = await factories.autopilot(w, agent.row["id"], mode="create_issue", instructions="do it")
        async with ctx.pool.acquire() as conn:
            await factories.dispatched_run(conn, ap["id"])
        auth = {"Authorization": f"Bearer {agent.runtime_token}"}
        claimed = (await client.post("/v1/runtime/claim", headers=auth)).json()
        url = f"/v1/runtime/tasks/{claimed['task']['id']}/report"
        for _ in range(4):
            stale = await client.post(url, json={"lease_token": WRONG, "status": "succeeded"}, headers=auth)
            assert stale.status_code == 409
        async with ctx.pool.acquire() as conn:
            [row, *_] = await _late_rows(conn, claimed["task"]["id"])
        assert (row["actor_type"], row["actor_id"]) == ("runtime", str(agent.row["id"]))
