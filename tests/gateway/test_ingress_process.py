"""The real ``hookgate gateway`` process serves the ingress over a socket, and a restart loses nothing."""

import signal

import httpx

from tests.gateway import ingress_kit as kit


async def test_gateway_process_accepts_signed_deliveries_and_stays_consistent_across_a_kill(ctx, conn, spawn):
    h = await kit.hook(ctx)
    gateway = spawn.start("gateway", gateway=True)
    gateway.wait_ready()
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        raw, headers = kit.github({"action": "opened"})
        first = await http.post(h.path, content=raw, headers=headers)
        assert first.status_code == 200 and first.json()["status"] == "accepted"
        assert (await http.post("/hooks/awt_nope", content=raw, headers=headers)).status_code == 404
    gateway.signal(signal.SIGKILL)
    gateway.wait()
    again = spawn.start("gateway", gateway=True)
    again.wait_ready()
    async with httpx.AsyncClient(base_url=again.url) as http:
        retry = await http.post(h.path, content=raw, headers=headers)  # the provider's retry after a crash
    assert retry.json() == {"status": "duplicate", "delivery_id": first.json()["delivery_id"],
                            "run_id": first.json()["run_id"], "body_matches": True}
    [d] = await kit.deliveries(conn)
    assert d["attempt_count"] == 2 and len(await kit.runs(conn)) == 1
