"""Who may edit an agent or rotate its signing secret: its owner and the workspace's owners and admins.

The agent belongs to a plain member (its creator). Every cell acts on a fresh agent, so none depends on
another; a refused call must leave the agent, its secret and the audit log untouched.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from autopilot import workspaces
from hookgate.context import Context
from tests import factories
from tests.factories import bearer

CALLERS = ("anonymous", "member", "agent_owner", "admin", "owner", "other_workspace")
# The same rule as archiving: the agent's owner, or a workspace owner/admin; another workspace sees nothing.
EXPECTED = {"anonymous": 401, "member": 403, "agent_owner": 200, "admin": 200, "owner": 200,
            "other_workspace": 404}


async def _keys(ctx: Context) -> dict[str, dict[str, str]]:
    w = await factories.world(ctx)
    other = await factories.world(ctx, "globex")
    headers = {"anonymous": {}, "owner": w.auth, "other_workspace": other.auth}
    async with ctx.pool.acquire() as conn:
        for label, role in (("member", "member"), ("agent_owner", "member"), ("admin", "admin")):
            _, key = await workspaces.add_member(conn, w.workspace_id, label, role)
            headers[label] = bearer(key)
    return headers


async def _agent(client: httpx.AsyncClient, headers: dict[str, str], kind: str = "http") -> dict[str, Any]:
    runtime = {"kind": "http", "url": "http://127.0.0.1:9/agent"} if kind == "http" else {"kind": "pull"}
    made = await client.post("/v1/agents", headers=headers, json={"name": "mine", "runtime": runtime})
    assert made.status_code == 201, made.text
    return dict(made.json())


async def _state(ctx: Context, agent_id: str) -> tuple[Any, ...]:
    async with ctx.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM agent WHERE id = $1", agent_id)
        audits = await conn.fetchval("SELECT count(*) FROM audit_log WHERE subject_id = $1", agent_id)
    return tuple(row.values()), audits


@pytest.mark.parametrize("kind", ["http", "pull"])
async def test_who_may_edit_an_agent(ctx, client, kind):
    headers = await _keys(ctx)
    got = {}
    for caller in CALLERS:
        agent = await _agent(client, headers["agent_owner"], kind)
        before = await _state(ctx, agent["id"])
        r = await client.patch(f"/v1/agents/{agent['id']}", headers=headers[caller],
                               json={"name": "renamed", "max_concurrency": 2})
        got[caller] = r.status_code
        assert set(r.json()) >= ({"error", "message"} if r.status_code >= 400 else {"id"})
        if r.status_code >= 400:
            assert await _state(ctx, agent["id"]) == before, caller
        else:
            assert r.json()["name"] == "renamed" and r.json()["max_concurrency"] == 2
    assert got == EXPECTED


async def test_who_may_rotate_an_agents_secret(ctx, client):
    headers = await _keys(ctx)
    got = {}
    for caller in CALLERS:
        agent = await _agent(client, headers["agent_owner"])
        before = await _state(ctx, agent["id"])
        r = await client.post(f"/v1/agents/{agent['id']}/rotate-secret", headers=headers[caller])
        got[caller] = r.status_code
        if r.status_code >= 400:
            assert set(r.json()) == {"error", "message"}
            assert await _state(ctx, agent["id"]) == before, caller
        else:
            assert r.json()["signing_secret"].startswith("whsec_")
    assert got == EXPECTED


async def test_an_agent_of_an_admin_is_not_editable_by_a_plain_member(ctx, client):
    headers = await _keys(ctx)
    agent = await _agent(client, headers["admin"])
    r = await client.patch(f"/v1/agents/{agent['id']}", headers=headers["member"], json={"name": "mine now"})
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    r = await client.post(f"/v1/agents/{agent['id']}/rotate-secret", headers=headers["member"])
    assert r.status_code == 403


async def test_the_answer_of_an_edit_never_holds_the_signing_secret(ctx, client):
    headers = await _keys(ctx)
    agent = await _agent(client, headers["agent_owner"])
    r = await client.patch(f"/v1/agents/{agent['id']}", headers=headers["agent_owner"], json={"timeout_s": 5})
    assert r.status_code == 200
    assert agent["signing_secret"] not in r.text and "signing_secret" not in r.json()
