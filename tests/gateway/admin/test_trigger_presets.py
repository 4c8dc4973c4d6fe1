"""The data presets through the API and the ingress: created by name, given a secret or a public key, checked."""

from __future__ import annotations

import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from hookgate.send import signed_request
from tests.gateway.test_data_presets import DOCUMENTED, SECRET


async def test_each_hmac_preset_through_the_api_accepts_what_hookgate_send_signs(client, team, conn):
    for name in sorted(DOCUMENTED):
        made = await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                                 json={"kind": "webhook", "provider": name})
        assert made.status_code == 201, made.text
        trigger = made.json()
        assert trigger["provider"] == name and trigger["signature"] is None  # the preset's own
        put = await client.put(f"/v1/triggers/{trigger['id']}/signing-secret", headers=team.h("owner"),
                               json={"secret": SECRET})
        assert put.status_code == 200, put.text
        url = f"http://testserver/hooks/{trigger['token']}"
        raw, headers = signed_request(name, url, SECRET, now=int(time.time()))
        good = await client.post(f"/hooks/{trigger['token']}", content=raw, headers=headers)
        assert good.status_code == 200 and good.json()["status"] == "accepted", (name, good.text)
        forged = await client.post(f"/hooks/{trigger['token']}", content=raw,
                                   headers=signed_request(name, url, "a guess at it...", now=int(time.time()))[1])
        assert forged.status_code == 401, (name, forged.text)
        stored = await conn.fetchrow("SELECT provider, status FROM webhook_delivery WHERE id = $1",
                                     good.json()["delivery_id"])
        assert stored["provider"] == name and stored["status"] != "rejected"


async def test_public_key_presets_take_a_public_key_not_a_secret(client, team):
    key = ed25519.Ed25519PrivateKey.generate()
    public_hex = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    trigger = (await client.post(f"/v1/autopilots/{team.autopilot_id}/triggers", headers=team.h("owner"),
                                 json={"kind": "webhook", "provider": "discord"})).json()
    path = f"/v1/triggers/{trigger['id']}/signing-secret"
    as_secret = await client.put(path, headers=team.h("owner"), json={"secret": SECRET})
    assert as_secret.status_code == 422 and "public_key" in as_secret.json()["message"]
    assert (await client.put(path, headers=team.h("owner"), json={"public_key": public_hex})).status_code == 200
    raw, ts = b'{"type": 2, "id": "81", "data": {"name": "blep"}}', str(int(time.time()))
    headers = {"content-type": "application/json", "X-Signature-Timestamp": ts,
               "X-Signature-Ed25519": key.sign(ts.encode() + raw).hex()}
    good = await client.post(f"/hooks/{trigger['token']}", content=raw, headers=headers)
    assert good.status_code == 200 and good.json()["status"] == "accepted", good.text
    forged = await client.post(f"/hooks/{trigger['token']}", content=raw + b" ", headers=headers)
    assert forged.status_code == 401
