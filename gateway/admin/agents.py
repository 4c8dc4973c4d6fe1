"""Agents (``http``: we push to a URL; ``pull``: a runtime claims work) and squads (a leader + members).

The credential is returned once at creation: ``signing_secret`` (``whsec_…``, signs our pushes) for an
http agent, ``runtime_token`` (``hgr_…``) for a pull agent. Afterwards only a last-4 hint is shown, but for
the new secret of a rotation, shown once too. An agent is changed by its owner or a workspace owner/admin.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict, Field, RootModel

from autopilot import agents, audit
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints, patch_fields
from gateway.admin.pagination import Page, PageQuery
from gateway.errors import ApiError
from hookgate import egress, retry
from hookgate.database import one
from sql import Q

api = Endpoints("Agents and squads")


class HttpRuntimeIn(BaseModel):
    """Push tasks to ``url`` (signed with the agent's whsec_ secret)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["http"]
    url: str = Field(pattern=r"^https?://[^\s/]+", max_length=2000)
    timeout_s: float = Field(default=10.0, gt=0, le=300)


class PullRuntimeIn(BaseModel):
    """A runtime that claims tasks with its hgr_ token."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["pull"]


class RuntimeIn(RootModel[Annotated[HttpRuntimeIn | PullRuntimeIn, Field(discriminator="kind")]]):
    """How the agent receives work."""


Delay = Annotated[float, Field(gt=0, le=retry.MAX_DELAY_S)]
RetrySchedule = Annotated[list[Delay], Field(min_length=1, max_length=retry.MAX_STEPS, description=(
    "Seconds between attempts of this agent's tasks (n delays: n + 1 attempts, ±10 % jitter); null: the "
    "gateway's HOOKGATE_PUSH_RETRY_SCHEDULE"))]


class AgentIn(BaseModel):
    """A new agent."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    runtime: RuntimeIn
    visibility: Literal["workspace", "private"] = "workspace"
    max_concurrency: int = Field(default=4, ge=1, le=10000)
    retry_schedule: RetrySchedule | None = None


class AgentPatch(BaseModel):
    """An edit of an agent: only the fields sent change (``url`` and ``timeout_s``: http agents only)."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+", max_length=2000)
    timeout_s: float | None = Field(default=None, gt=0, le=300)
    max_concurrency: int | None = Field(default=None, ge=1, le=10000)
    visibility: Literal["workspace", "private"] | None = None
    #: null puts the agent back on the gateway's default schedule.
    retry_schedule: RetrySchedule | None = None


class RotatedSecretOut(BaseModel):
    """An http agent's new signing secret, shown once; the old one still signs pushes until the expiry."""

    signing_secret: str
    previous_expires_at: datetime


class RuntimeOut(BaseModel):
    """An agent's runtime binding."""

    kind: Literal["http", "pull"]
    url: str | None = None
    timeout_s: float | None = None
    secret_hint: str | None = None
    token_hint: str | None = None


class HealthOut(BaseModel):
    """An agent's health: ``unhealthy`` while its circuit is open (its pushes kept failing).

    ``since``: when it entered this state; ``next_probe_at``: when the next probe push may go (unhealthy
    only); ``failures``: consecutive failed pushes; ``last_error``: the last failed push's error.
    """

    state: Literal["healthy", "unhealthy"]
    since: datetime
    next_probe_at: datetime | None
    failures: int
    last_error: str | None


class AgentOut(BaseModel):
    """An agent (credentials only as hints)."""

    id: UUID
    name: str
    owner_id: UUID
    visibility: Literal["workspace", "private"]
    runtime: RuntimeOut
    max_concurrency: int
    retry_schedule: list[float] | None
    health: HealthOut
    created_at: datetime
    archived_at: datetime | None


class NewAgentOut(AgentOut):
    """A created agent with its credential, shown once."""

    signing_secret: str | None = None
    runtime_token: str | None = None


class AgentPage(Page[AgentOut]):
    """A page of agents."""


class SquadIn(BaseModel):
    """A squad: work assigned to it goes to its leader."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    leader_id: UUID
    member_ids: list[UUID] = Field(default_factory=list, max_length=100)


class SquadOut(BaseModel):
    """A squad and its member agents (the leader included)."""

    id: UUID
    name: str
    leader_id: UUID
    member_ids: list[UUID]
    created_at: datetime


class SquadPage(Page[SquadOut]):
    """A page of squads."""


def agent_out(row: asyncpg.Record) -> AgentOut:
    """Render an agent row without its secrets."""
    if row["runtime_kind"] == "http":
        # An older row may hold credentials in its URL (refused since): never shown.
        runtime = RuntimeOut(kind="http", url=egress.redact(row["endpoint_url"]), timeout_s=row["timeout_s"],
                             secret_hint=row["signing_secret_hint"])
    else:
        runtime = RuntimeOut(kind="pull", token_hint=row["runtime_token_hint"])
    return AgentOut(id=row["id"], name=row["name"], owner_id=row["owner_id"], visibility=row["visibility"],
                    runtime=runtime, max_concurrency=row["max_concurrency"], retry_schedule=row["retry_schedule"],
                    health=health_out(row), created_at=row["created_at"], archived_at=row["archived_at"])


def health_out(row: asyncpg.Record) -> HealthOut:
    """The agent's health from its ``health_*`` columns (queries join agent_health); no row: never failed."""
    if row.get("health_state") is None:
        return HealthOut(state="healthy", since=row["created_at"], next_probe_at=None, failures=0, last_error=None)
    return HealthOut(state=row["health_state"], since=row["health_since"], next_probe_at=row["health_next_probe_at"],
                     failures=row["health_failures"], last_error=row["health_last_error"])


def squad_out(row: asyncpg.Record) -> SquadOut:
    """Render a squad row (with ``member_ids`` aggregated by the query)."""
    return SquadOut(id=row["id"], name=row["name"], leader_id=row["leader_agent_id"],
                    member_ids=list(row["member_ids"]), created_at=row["created_at"])


async def check_agent_url(call: Call, url: str) -> None:
    """422 ``agent_url_forbidden`` / ``agent_url_unresolvable`` for a URL the egress policy refuses.

    Whoever saves an agent URL (create, or any later edit) goes through here.
    """
    try:
        await egress.Policy.from_settings(call.ctx.settings).check_url(url)
    except egress.EgressRefused as refused:
        raise ApiError(422, refused.code, refused.message) from None


def check_concurrency(call: Call, max_concurrency: int | None) -> None:
    """422 ``max_concurrency_too_high`` above the gateway's bound (HOOKGATE_AGENT_MAX_CONCURRENCY)."""
    cap = call.ctx.settings.agent_max_concurrency
    if max_concurrency is not None and max_concurrency > cap:
        raise ApiError(422, "max_concurrency_too_high",
                       f"max_concurrency: at most {cap} (HOOKGATE_AGENT_MAX_CONCURRENCY of this gateway)")


@api.add("POST", "/v1/agents", summary="Create an agent", response=NewAgentOut, status=201, body=AgentIn)
async def create_agent(call: Call) -> dict[str, Any]:
    """Any member may create an agent; they own it. The credential is in this answer only.

    An http agent's URL must pass the egress policy (no loopback, private or link-local address unless
    allowed by HOOKGATE_AGENT_ALLOW_CIDRS, not this gateway's own webhook ingress, no credentials).
    ``max_concurrency`` is at most HOOKGATE_AGENT_MAX_CONCURRENCY (422 ``max_concurrency_too_high``).
    """
    body: AgentIn = call.body
    p, runtime = call.principal, body.runtime.root
    check_concurrency(call, body.max_concurrency)
    if isinstance(runtime, HttpRuntimeIn):
        await check_agent_url(call, runtime.url)
        made = await agents.create_http_agent(
            call.conn, call.ctx.keyring, workspace_id=p.workspace_id, owner_id=p.member_id, name=body.name,
            url=runtime.url, timeout_s=runtime.timeout_s, visibility=body.visibility,
            max_concurrency=body.max_concurrency)
    else:
        made = await agents.create_pull_agent(
            call.conn, workspace_id=p.workspace_id, owner_id=p.member_id, name=body.name,
            visibility=body.visibility, max_concurrency=body.max_concurrency)
    row = made.row
    if body.retry_schedule is not None:
        await agents.update_agent(call.conn, row["id"], agents.AgentChange(retry_schedule=body.retry_schedule))
        row = one(await call.conn.fetchrow(Q.agent_get, p.workspace_id, row["id"]))
    # Only the credential of this runtime kind is in the answer (the other key is absent, not null).
    out = agent_out(row).model_dump(mode="json")
    if made.signing_secret is not None:
        return out | {"signing_secret": made.signing_secret}
    return out | {"runtime_token": made.runtime_token}


@api.add("GET", "/v1/agents", summary="List agents", response=AgentPage, query=PageQuery)
async def list_agents(call: Call) -> dict[str, Any]:
    """Agents of the workspace, oldest first."""
    q: PageQuery = call.query
    return await pagination.fetch(call.conn, Q.agent_list, q, agent_out, call.principal.workspace_id)


@api.add("GET", "/v1/agents/{agent_id}", summary="Get an agent", response=AgentOut)
async def get_agent(call: Call) -> AgentOut:
    """One agent."""
    return agent_out(await call.scoped(Q.agent_get, "agent"))


async def _changeable_agent(call: Call, action: str) -> asyncpg.Record:
    """The agent, if the caller owns it or is a workspace owner/admin: 404 for another workspace's, else 403."""
    row = await call.scoped(Q.agent_get, "agent")
    if row["owner_id"] != call.principal.member_id:
        auth.require_admin(call.principal, f"{action} other members' agents")
    return row


def _not_http(row: asyncpg.Record, status: int, what: str) -> ApiError | None:
    if row["runtime_kind"] == "http":
        return None
    return ApiError(status, "not_an_http_agent", f"a pull agent has no {what}")


@api.add("PATCH", "/v1/agents/{agent_id}", summary="Edit an agent", response=AgentOut, body=AgentPatch)
async def edit_agent(call: Call) -> AgentOut:
    """The agent's owner, or an owner/admin (AGENT_UPDATE with the changed fields).

    A new ``url`` passes the egress policy as at creation. A lower ``max_concurrency`` cuts no running
    task, but no new one starts until fewer than the new cap run; a new one is at most
    HOOKGATE_AGENT_MAX_CONCURRENCY (422 ``max_concurrency_too_high``). A new ``retry_schedule`` (null: the
    default) applies to the next retry of every task of the agent.
    """
    body: AgentPatch = call.body
    row = await _changeable_agent(call, "edit")
    sent = patch_fields(body, nullable=("retry_schedule",))
    refused = [f for f in ("url", "timeout_s") if f in sent]
    if refused and (error := _not_http(row, 422, " or ".join(refused))) is not None:
        raise error
    current = {"name": row["name"], "url": row["endpoint_url"], "timeout_s": row["timeout_s"],
               "max_concurrency": row["max_concurrency"], "visibility": row["visibility"],
               "retry_schedule": row["retry_schedule"]}
    changed = {k: v for k, v in sent.items() if v != current[k]}
    if not changed:
        return agent_out(row)
    check_concurrency(call, changed.get("max_concurrency"))
    if "url" in changed:
        await check_agent_url(call, changed["url"])
    # The audit shows a schedule set back to null as null (the default), as the caller sent it.
    shown = changed | ({"url": egress.redact(changed["url"])} if "url" in changed else {})
    # A schedule set back to null is the default again: the change says so with an empty one.
    if "retry_schedule" in changed and changed["retry_schedule"] is None:
        changed["retry_schedule"] = []
    await agents.update_agent(call.conn, row["id"], agents.AgentChange(**changed))
    updated = one(await call.conn.fetchrow(Q.agent_get, call.principal.workspace_id, row["id"]))
    await audit.record(call.conn, "AGENT_UPDATE", actor_type="member", actor_id=call.principal.member_id,
                       subject_type="agent", subject_id=row["id"], workspace_id=call.principal.workspace_id,
                       detail={"changed": sorted(changed), "to": shown})
    return agent_out(updated)


@api.add("POST", "/v1/agents/{agent_id}/rotate-secret", summary="Rotate an http agent's signing secret",
         response=RotatedSecretOut)
async def rotate_agent_secret(call: Call) -> RotatedSecretOut:
    """The agent's owner, or an owner/admin. The new secret is in this answer only (AGENT_SECRET_ROTATE).

    For 24 hours pushes carry two signatures, by the new and by the old secret; then only the new one.
    """
    row = await _changeable_agent(call, "rotate the secrets of")
    if (error := _not_http(row, 409, "signing secret: it authenticates with its runtime token")) is not None:
        raise error
    rotated, secret = await agents.rotate_signing_secret(call.conn, call.ctx.keyring, row["id"])
    await audit.record(call.conn, "AGENT_SECRET_ROTATE", actor_type="member", actor_id=call.principal.member_id,
                       subject_type="agent", subject_id=row["id"], workspace_id=call.principal.workspace_id,
                       detail={"previous_expires_at": rotated["previous_secret_expires_at"].isoformat()})
    return RotatedSecretOut(signing_secret=secret, previous_expires_at=rotated["previous_secret_expires_at"])


@api.add("POST", "/v1/agents/{agent_id}/archive", summary="Archive an agent", response=AgentOut)
async def archive_agent(call: Call) -> AgentOut:
    """The agent's owner, or an owner/admin. Runs assigned to it are skipped (``agent_archived``) from now on."""
    row = await _changeable_agent(call, "archive")
    async with call.conn.transaction():
        one(await call.conn.fetchrow(Q.agent_archive, call.principal.workspace_id, row["id"]))
        if row["archived_at"] is None:
            await audit.record(call.conn, "AGENT_ARCHIVE", actor_type="member", actor_id=call.principal.member_id,
                               subject_type="agent", subject_id=row["id"], workspace_id=call.principal.workspace_id)
        archived = one(await call.conn.fetchrow(Q.agent_get, call.principal.workspace_id, row["id"]))  # with health
    return agent_out(archived)


@api.add("POST", "/v1/squads", summary="Create a squad", response=SquadOut, status=201, body=SquadIn)
async def create_squad(call: Call) -> SquadOut:
    """A squad of the workspace's agents; the leader receives the squad's work."""
    body: SquadIn = call.body
    ws = call.principal.workspace_id
    for agent_id in {body.leader_id, *body.member_ids}:
        if await call.conn.fetchrow(Q.agent_get, ws, agent_id) is None:
            raise ApiError(422, "invalid_request", f"agent {agent_id} does not exist in this workspace")
    squad = await agents.create_squad(call.conn, workspace_id=ws, name=body.name, leader_id=body.leader_id,
                                      member_ids=body.member_ids)
    return squad_out(one(await call.conn.fetchrow(Q.squad_get, ws, squad["id"])))


@api.add("GET", "/v1/squads", summary="List squads", response=SquadPage, query=PageQuery)
async def list_squads(call: Call) -> dict[str, Any]:
    """Squads of the workspace, oldest first."""
    q: PageQuery = call.query
    return await pagination.fetch(call.conn, Q.squad_list, q, squad_out, call.principal.workspace_id)


@api.add("GET", "/v1/squads/{squad_id}", summary="Get a squad", response=SquadOut)
async def get_squad(call: Call) -> SquadOut:
    """One squad."""
    return squad_out(await call.scoped(Q.squad_get, "squad"))
