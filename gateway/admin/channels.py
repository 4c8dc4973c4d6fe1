"""Notification channels: where a workspace's alerts go (owners and admins only; a plain member gets 403).

A channel is a URL, the events it hears, and a ``whsec_`` signing secret shown once, in the creation's
answer (afterwards a last-4 hint). The URL passes the egress policy when it is saved, as an agent's does
(422 ``channel_url_forbidden`` / ``channel_url_unresolvable``; credentials in it are refused). ``…/test``
queues a ``ping`` to the channel, sent like any notification (202 with its id). Creation and deletion are
audited (``NOTIFICATION_CHANNEL_CREATE`` / ``_DELETE``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from autopilot import alerts, audit
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints
from gateway.admin.pagination import Page, PageQuery
from gateway.errors import ApiError
from hookgate import egress
from sql import Q

api = Endpoints("Notification channels")

Event = Literal["run.failed", "agent.unhealthy", "agent.recovered", "autopilot.paused", "trigger.rejections_spike"]
#: The egress policy's codes, said of a channel URL.
_URL_CODES = {egress.FORBIDDEN: "channel_url_forbidden", egress.UNRESOLVABLE: "channel_url_unresolvable"}


class ChannelIn(BaseModel):
    """A new notification channel."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    url: str = Field(pattern=r"^https?://[^\s/]+", max_length=2000)
    events: list[Event] = Field(min_length=1, max_length=len(alerts.EVENTS))


class ChannelOut(BaseModel):
    """A notification channel (its secret only as a hint)."""

    id: UUID
    name: str
    url: str
    events: list[Event]
    secret_hint: str
    created_by: UUID | None
    created_at: datetime


class NewChannelOut(ChannelOut):
    """A created channel with its signing secret, shown once."""

    signing_secret: str


class ChannelPage(Page[ChannelOut]):
    """A page of notification channels."""


class PingOut(BaseModel):
    """The queued ``ping`` notification."""

    notification_id: UUID


def channel_out(row: asyncpg.Record) -> ChannelOut:
    """Render a channel row without its secret."""
    return ChannelOut(id=row["id"], name=row["name"], url=row["url"], events=list(row["events"]),
                      secret_hint=row["signing_secret_hint"], created_by=row["created_by"],
                      created_at=row["created_at"])


def _admin(call: Call) -> None:
    auth.require_admin(call.principal, "manage notification channels")


async def check_channel_url(call: Call, url: str) -> None:
    """422 ``channel_url_forbidden`` / ``channel_url_unresolvable`` for a URL the egress policy refuses."""
    try:
        await egress.Policy.from_settings(call.ctx.settings).check_url(url)
    except egress.EgressRefused as refused:
        code = _URL_CODES.get(refused.code, "channel_url_forbidden")
        raise ApiError(422, code, refused.message.replace("agent URL", "channel URL")) from None


@api.add("POST", "/v1/notification-channels", summary="Create a notification channel", response=NewChannelOut,
         status=201, body=ChannelIn)
async def create_channel(call: Call) -> dict[str, Any]:
    """Owners and admins. The signing secret is in this answer only (NOTIFICATION_CHANNEL_CREATE).

    The URL must pass the egress policy (no loopback, private or link-local address unless allowed by
    HOOKGATE_AGENT_ALLOW_CIDRS, not this gateway's own webhook ingress, no credentials).
    """
    _admin(call)
    body: ChannelIn = call.body
    await check_channel_url(call, body.url)
    p = call.principal
    made = await alerts.create_channel(call.conn, call.ctx.keyring, workspace_id=p.workspace_id, name=body.name,
                                       url=body.url, events=list(dict.fromkeys(body.events)), created_by=p.member_id)
    await audit.record(call.conn, "NOTIFICATION_CHANNEL_CREATE", actor_type="member", actor_id=p.member_id,
                       subject_type="notification_channel", subject_id=made.row["id"], workspace_id=p.workspace_id,
                       detail={"name": body.name, "url": body.url, "events": list(made.row["events"])})
    return channel_out(made.row).model_dump(mode="json") | {"signing_secret": made.signing_secret}


@api.add("GET", "/v1/notification-channels", summary="List notification channels", response=ChannelPage,
         query=PageQuery)
async def list_channels(call: Call) -> dict[str, Any]:
    """Owners and admins: the workspace's channels, oldest first."""
    _admin(call)
    q: PageQuery = call.query
    return await pagination.fetch(call.conn, Q.channel_list, q, channel_out, call.principal.workspace_id)


@api.add("GET", "/v1/notification-channels/{channel_id}", summary="Get a notification channel",
         response=ChannelOut)
async def get_channel(call: Call) -> ChannelOut:
    """Owners and admins: one channel."""
    _admin(call)
    return channel_out(await call.scoped(Q.channel_get, "channel"))


@api.add("DELETE", "/v1/notification-channels/{channel_id}", summary="Delete a notification channel",
         response=ChannelOut)
async def delete_channel(call: Call) -> ChannelOut:
    """Owners and admins. Its notifications, sent or not, go with it (NOTIFICATION_CHANNEL_DELETE)."""
    _admin(call)
    p = call.principal
    row = await call.conn.fetchrow(Q.channel_get, p.workspace_id, call.path["channel_id"])
    if row is None or await call.conn.fetchrow(Q.channel_delete, p.workspace_id, row["id"]) is None:
        raise auth.not_found("channel")
    await audit.record(call.conn, "NOTIFICATION_CHANNEL_DELETE", actor_type="member", actor_id=p.member_id,
                       subject_type="notification_channel", subject_id=row["id"], workspace_id=p.workspace_id,
                       detail={"name": row["name"], "url": row["url"], "events": list(row["events"])})
    return channel_out(row)


@api.add("POST", "/v1/notification-channels/{channel_id}/test", summary="Send a ping to a notification channel",
         response=PingOut, status=202)
async def test_channel(call: Call) -> PingOut:
    """Owners and admins. Queues a ``ping`` notification to this channel, sent (and retried) like any other."""
    _admin(call)
    p = call.principal
    notification_id = await alerts.ping(call.conn, p.workspace_id, call.path["channel_id"],
                                        {"channel_id": str(call.path["channel_id"]), "requested_by": str(p.member_id)})
    if notification_id is None:
        raise auth.not_found("channel")
    return PingOut(notification_id=notification_id)
