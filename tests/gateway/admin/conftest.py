"""A workspace with one member of each role, an autopilot with a collaborator, and another workspace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from autopilot import workspaces
from hookgate import admin_client
from hookgate.cli import build_parser
from hookgate.context import Context
from tests import factories
from tests.factories import bearer


def agent_body(url: str = "http://127.0.0.1:9/agent", **extra: Any) -> dict[str, Any]:
    """What ``POST /v1/agents`` takes for an http agent called bot at ``url``, with ``extra`` fields."""
    return {"name": "bot", "runtime": {"kind": "http", "url": url}} | extra


async def create_agent(client: httpx.AsyncClient, w: factories.World, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/agents`` as ``w``'s owner, which must answer 201; the new agent."""
    made = await client.post("/v1/agents", headers=w.auth, json=body)
    assert made.status_code == 201, made.text
    return dict(made.json())


async def hookgate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``hookgate ARGV…`` (the admin CLI) in this process: its exit code, stdout and stderr."""
    args = build_parser().parse_args(list(argv))
    code = 0
    try:
        await admin_client.run(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


@dataclass
class Team:
    """Keys by role name, the autopilot (created by the owner) and its http agent."""

    ctx: Context
    world: factories.World
    keys: dict[str, str]
    ids: dict[str, Any]
    autopilot_id: str
    agent_id: str
    other: factories.World

    def h(self, role: str) -> dict[str, str]:
        """Headers for a role: owner, admin, collaborator, member, outsider (other workspace)."""
        return bearer(self.keys[role])


@pytest.fixture
async def team(ctx: Context, client: httpx.AsyncClient) -> Team:
    """owner, admin, collaborator (member role, added to the autopilot), member (not), outsider."""
    w = await factories.world(ctx)
    other = await factories.world(ctx, "globex")
    keys, ids = {"owner": w.api_key, "outsider": other.api_key}, {"owner": w.owner_id, "outsider": other.owner_id}
    async with ctx.pool.acquire() as conn:
        for role, name in (("admin", "ada"), ("member", "collaborator"), ("member", "member")):
            row, key = await workspaces.add_member(conn, w.workspace_id, name, role)
            label = name if role == "member" else role
            keys[label], ids[label] = key, row["id"]
    agent = await factories.http_agent(w)
    ap = await factories.autopilot(w, agent.row["id"])
    added = await client.post(f"/v1/autopilots/{ap['id']}/collaborators", headers=bearer(w.api_key),
                              json={"member_id": str(ids["collaborator"])})
    assert added.status_code == 201, added.text
    return Team(ctx, w, keys, ids, str(ap["id"]), str(agent.row["id"]), other)
