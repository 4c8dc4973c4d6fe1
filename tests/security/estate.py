"""A workspace with one of everything, made through the admin API and ingress, with every secret it handed out."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from autopilot.dispatch import Options, dispatch_run
from hookgate.context import Context
from tests import factories

SIGNING_SECRET = "chaos-signing-secret-" + "s" * 20
VERIFY_TOKEN = "a-meta-verify-token-" + "v" * 12


@dataclass
class Estate:
    """Ids by path parameter name, the owner's headers, and every plaintext secret seen."""

    world: factories.World
    ids: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)

    @property
    def auth(self) -> dict[str, str]:
        """The owner's Authorization header."""
        return self.world.auth


async def _post(client: httpx.AsyncClient, path: str, auth: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    answer = await client.post(path, headers=auth, json=body)
    assert answer.status_code in (200, 201), (path, answer.text)
    return dict(answer.json())


async def build(ctx: Context, client: httpx.AsyncClient, name: str) -> Estate:
    """Members, keys, agents, squad, notification channel, autopilots, triggers, a delivery, run, issue, task."""
    estate = Estate(await factories.world(ctx, name))
    auth, ids, secrets = estate.auth, estate.ids, estate.secrets
    secrets.append(estate.world.api_key)
    member = await _post(client, "/v1/members", auth, {"name": "m", "role": "member"})
    key = await _post(client, f"/v1/members/{member['id']}/keys", auth, {})
    ids |= {"member_id": member["id"], "key_id": key["id"]}
    secrets += [member["api_key"], key["api_key"]]
    http = await _post(client, "/v1/agents", auth, {"name": "h", "runtime": {"kind": "http", "url": "http://127.0.0.1:9/"}})
    pull = await _post(client, "/v1/agents", auth, {"name": "p", "runtime": {"kind": "pull"}})
    secrets += [http["signing_secret"], pull["runtime_token"]]
    squad = await _post(client, "/v1/squads", auth, {"name": "s", "leader_id": http["id"]})
    ids |= {"agent_id": http["id"], "squad_id": squad["id"]}
    channel = await _post(client, "/v1/notification-channels", auth,
                          {"name": "ops", "url": "http://127.0.0.1:9/alerts", "events": ["run.failed"]})
    secrets.append(channel["signing_secret"])
    ids["channel_id"] = channel["id"]
    ap = await _post(client, "/v1/autopilots", auth, {"title": "t", "instructions": "i",
                                                      "execution_mode": "create_issue",
                                                      "assignee": {"type": "agent", "id": http["id"]}})
    hook = await _post(client, f"/v1/autopilots/{ap['id']}/triggers", auth, {"kind": "webhook", "provider": "github"})
    put = await client.put(f"/v1/triggers/{hook['id']}/signing-secret", headers=auth, json={"secret": SIGNING_SECRET})
    assert put.status_code == 200, put.text
    secrets += [hook["token"], SIGNING_SECRET]
    meta = await _post(client, f"/v1/autopilots/{ap['id']}/triggers", auth, {
        "kind": "webhook", "provider": "meta", "handshake": {"kind": "meta", "verify_token": VERIFY_TOKEN}})
    secrets += [meta["token"], VERIFY_TOKEN]
    ids |= {"autopilot_id": ap["id"], "trigger_id": hook["id"]}
    ids["delivery_id"], run_id = await _deliver(client, hook["token"])
    async with ctx.pool.acquire() as conn:
        done = await dispatch_run(conn, uuid.UUID(run_id), Options(heartbeat_timeout_s=120.0))
    ids |= {"run_id": run_id, "issue_id": str(done.issue_id), "task_id": str(done.task_id)}
    return estate


async def _deliver(client: httpx.AsyncClient, token: str) -> tuple[str, str]:
    raw = json.dumps({"action": "opened"}).encode()
    mac = hmac.new(SIGNING_SECRET.encode(), raw, hashlib.sha256).hexdigest()
    answer = await client.post(f"/hooks/{token}", content=raw, headers={
        "content-type": "application/json", "x-github-event": "issues", "x-github-delivery": str(uuid.uuid4()),
        "x-hub-signature-256": f"sha256={mac}"})
    assert answer.json()["status"] == "accepted", answer.text
    return answer.json()["delivery_id"], answer.json()["run_id"]
