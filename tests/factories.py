"""Build workspaces, agents, autopilots and triggers for tests through the domain functions."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from autopilot import admission, agents, dispatch, rules, tasks, workspaces
from hookgate.context import Context


def bearer(key: str) -> dict[str, str]:
    """Authorization header for a key or a runtime token."""
    return {"Authorization": f"Bearer {key}"}


@dataclass
class World:
    """A bootstrapped workspace with its owner and key."""

    ctx: Context
    workspace_id: Any
    owner_id: Any
    api_key: str

    @property
    def auth(self) -> dict[str, str]:
        """Authorization header for the owner."""
        return bearer(self.api_key)


async def world(ctx: Context, name: str = "acme") -> World:
    """A workspace with an owner key."""
    async with ctx.pool.acquire() as conn:
        boot = await workspaces.bootstrap(conn, name)
    return World(ctx, boot.workspace_id, boot.member_id, boot.api_key)


async def http_agent(w: World, url: str = "http://127.0.0.1:9/agent", **kw: Any) -> agents.NewAgent:
    """An HTTP agent owned by the workspace owner."""
    async with w.ctx.pool.acquire() as conn:
        return await agents.create_http_agent(
            conn, w.ctx.keyring, workspace_id=w.workspace_id, owner_id=w.owner_id,
            name=kw.pop("name", "agent"), url=url, **kw,
        )


async def pull_agent(w: World, **kw: Any) -> agents.NewAgent:
    """A pull agent owned by the workspace owner."""
    async with w.ctx.pool.acquire() as conn:
        return await agents.create_pull_agent(
            conn, workspace_id=w.workspace_id, owner_id=w.owner_id, name=kw.pop("name", "runtime"), **kw
        )


async def autopilot(w: World, agent_id: Any, mode: str = "run_only", **kw: Any) -> asyncpg.Record:
    """An active autopilot assigned to an agent, created by the owner."""
    async with w.ctx.pool.acquire() as conn:
        row, _ = await rules.create_autopilot(
            conn, workspace_id=w.workspace_id, creator_id=kw.pop("creator_id", w.owner_id),
            title=kw.pop("title", "triage"), assignee_type=kw.pop("assignee_type", "agent"),
            assignee_id=agent_id, execution_mode=mode, **kw,
        )
    return row


async def webhook_trigger(w: World, autopilot_row: asyncpg.Record, provider: str = "generic",
                          secret: str | None = None, **kw: Any) -> tuple[asyncpg.Record, str]:
    """A webhook trigger (optionally with a signing secret); returns ``(trigger, token)``."""
    async with w.ctx.pool.acquire() as conn:
        row, token = await rules.create_webhook_trigger(
            conn, w.ctx.keyring, autopilot=autopilot_row, publisher=rules.Publisher.member(w.owner_id),
            provider=provider, **kw,
        )
        if secret is not None:
            await rules.set_signing_secret(conn, w.ctx.keyring, row["id"], secret)
    return row, token


@dataclass
class Small:
    """A workspace with one agent, one autopilot assigned to it and one webhook trigger of that autopilot."""

    world: World
    agent: agents.NewAgent
    autopilot: asyncpg.Record
    trigger: asyncpg.Record
    token: str


async def small(ctx: Context, name: str = "acme", *, pull: bool = False, agent_url: str = "http://127.0.0.1:9/agent",
                mode: str = "run_only", title: str = "triage", **trigger_kw: Any) -> Small:
    """A :class:`Small` world: an HTTP agent (a pull agent if ``pull``), ``trigger_kw`` for :func:`webhook_trigger`."""
    w = await world(ctx, name)
    agent = await (pull_agent(w) if pull else http_agent(w, url=agent_url))
    pilot = await autopilot(w, agent.row["id"], mode=mode, title=title)
    trigger, token = await webhook_trigger(w, pilot, **trigger_kw)
    return Small(w, agent, pilot, trigger, token)


async def schedule_trigger(w: World, autopilot_row: asyncpg.Record, cron: str, next_fire_at: datetime,
                           timezone: str = "UTC", **kw: Any) -> asyncpg.Record:
    """A schedule trigger with a given first fire time."""
    async with w.ctx.pool.acquire() as conn:
        return await rules.create_schedule_trigger(
            conn, autopilot=autopilot_row, publisher=rules.Publisher.member(w.owner_id), cron=cron,
            timezone=timezone, next_fire_at=next_fire_at, **kw,
        )


async def dispatched_run(conn: Any, autopilot_id: Any, payload: Any = None) -> Any:
    """An api run of the autopilot, admitted and dispatched (its task queued or its issue made); its id."""
    admitted = await admission.admit(conn, autopilot_id=autopilot_id, source="api", payload=payload or {},
                                     heartbeat_timeout_s=120.0)
    await dispatch.dispatch_run(conn, admitted.run_id, dispatch.Options(heartbeat_timeout_s=120.0))
    return admitted.run_id


async def claimed_http_task(ctx: Context, conn: Any) -> tuple[str, str, str]:
    """A running task of a new HTTP agent (in a workspace of its own), claimed as the push worker claims it.

    Returns ``(task id, lease token, agent id)``.
    """
    w = await world(ctx, f"pushed-{uuid.uuid4().hex[:6]}")
    agent = await http_agent(w)
    pilot = await autopilot(w, agent.row["id"], mode="create_issue", instructions="do it")
    await dispatched_run(conn, pilot["id"])
    [won] = await tasks.claim(conn, agent_id=agent.row["id"], lease_s=600, holder="w", actor_type="worker")
    return str(won.id), str(won.lease_token), str(agent.row["id"])


async def delivery(conn: Any, trigger: Mapping[str, Any], **columns: Any) -> Any:
    """Insert a ``webhook_delivery`` row of ``trigger`` directly, as ingress would have stored it; its id.

    ``columns`` are the row's own (by default a queued, unsigned delivery of event ``e`` by the generic preset);
    ``conn`` is a connection or a pool. None when the database stored no row (a dedupe key already held).
    """
    row = {"workspace_id": trigger.get("workspace_id"), "trigger_id": trigger["id"],
           "autopilot_id": trigger.get("autopilot_id"), "provider": "generic", "event": "e",
           "signature_status": "not_required", "status": "queued"} | columns
    values = ", ".join(f"${n}" for n in range(1, len(row) + 1))
    return await conn.fetchval(f"INSERT INTO webhook_delivery ({', '.join(row)}) VALUES ({values}) RETURNING id",
                               *row.values())
