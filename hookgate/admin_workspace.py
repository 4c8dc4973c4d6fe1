"""``hookgate me``, ``members …``, ``keys …``, ``audit …`` and ``channels …``: the workspace and who may act in it.

The caller, members and their admin API keys, the audit log, and notification channels (where alerts go).
"""

from __future__ import annotations

import argparse
from typing import Any

from hookgate.admin_client import Client, list_verb, noun, page, request, resource_id, verb

ROLES = ("owner", "admin", "member")
CHANNEL_EVENTS = ("run.failed", "agent.unhealthy", "agent.recovered", "autopilot.paused", "trigger.rejections_spike")

me = request("GET", "/v1/me")


async def members_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/members (the answer holds the member's first hgk_ key, shown once)."""
    body = {"name": a.name, "email": a.email, "role": a.role}
    return await c.call("POST", "/v1/members", json_body={k: v for k, v in body.items() if v is not None})


members_list = request("GET", "/v1/members", paged=True)
members_get = request("GET", "/v1/members/{member}")


async def members_update(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/members/{id} with ``role`` and/or ``disabled``."""
    body = {"role": a.role, "disabled": a.disabled}
    return await c.call("PATCH", f"/v1/members/{a.member}", json_body={k: v for k, v in body.items() if v is not None})


async def keys_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/members/{id}/keys for ``--member``, else for the caller (found with GET /v1/me)."""
    member = a.member or (await c.call("GET", "/v1/me"))["member_id"]
    return await c.call("POST", f"/v1/members/{member}/keys")


async def keys_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/keys (yours, or a member's within your reach)."""
    return await c.call("GET", "/v1/keys", params=page(a, member_id=a.member))


keys_get = request("GET", "/v1/keys/{key_id}")
keys_revoke = request("DELETE", "/v1/keys/{key_id}")


async def audit_list(c: Client, a: argparse.Namespace) -> Any:
    """GET /v1/audit."""
    return await c.call("GET", "/v1/audit", params=page(a, subject_id=a.subject, action=a.action))


async def channels_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/notification-channels (the answer holds the whsec_ signing secret, shown once)."""
    return await c.call("POST", "/v1/notification-channels",
                        json_body={"name": a.name, "url": a.endpoint, "events": a.event})


channels_list = request("GET", "/v1/notification-channels", paged=True)
channels_get = request("GET", "/v1/notification-channels/{channel}")
channels_delete = request("DELETE", "/v1/notification-channels/{channel}")
channels_test = request("POST", "/v1/notification-channels/{channel}/test")


# -- parser ------------------------------------------------------------------------------------------

def _me(sub: Any) -> None:
    verb(sub, "me", me, "who the API key is: member, workspace, role and key id", "get_me")


def _members(sub: Any) -> None:
    members = noun(sub, "members", "add, list, show and change workspace members")
    p = verb(members, "create", members_create, "add a member (owners and admins, a role up to their own); prints "
             "the member's first hgk_ API key once", "create_member")
    p.add_argument("--name", required=True, help="the member's name")
    p.add_argument("--email", help="their email (optional)")
    p.add_argument("--role", choices=ROLES, default="member", help="default member")
    list_verb(members, members_list, "list members", "list_members")
    verb(members, "get", members_get, "show a member", "get_member").add_argument("member", type=resource_id("member"))
    p = verb(members, "update", members_update, "change a member's role, or disable/enable them", "update_member")
    p.add_argument("member", type=resource_id("member"))
    p.add_argument("--role", choices=ROLES)
    state = p.add_mutually_exclusive_group()
    state.add_argument("--disable", dest="disabled", action="store_const", const=True,
                       help="their keys answer 401 until enabled (not revoked)")
    state.add_argument("--enable", dest="disabled", action="store_const", const=False, help="enable again")


def _keys(sub: Any) -> None:
    keys = noun(sub, "keys", "create, list, show and revoke admin API keys")
    verb(keys, "create", keys_create, "create an API key for you, or (owners, admins) for a member up to your role; "
         "prints the hgk_ key once", "create_key").add_argument(
        "--member", type=resource_id("member"), help="whose key (default: yours)")
    list_verb(keys, keys_list, "list your keys, or a member's within your reach", "list_keys").add_argument(
        "--member", type=resource_id("member"), help="a member's keys")
    verb(keys, "get", keys_get, "show a key's metadata (never the key itself)", "get_key").add_argument(
        "key_id", metavar="KEY_ID", type=resource_id("key"))
    verb(keys, "revoke", keys_revoke, "revoke a key: it stops working on the next request", "revoke_key").add_argument(
        "key_id", metavar="KEY_ID", type=resource_id("key"))


def _audit(sub: Any) -> None:
    audit = noun(sub, "audit", "the workspace's audit log (owners and admins)")
    p = list_verb(audit, audit_list, "list audit entries, newest first", "list_audit")
    p.add_argument("--subject", metavar="ID", help="entries about this subject (an agent, trigger, key … id)")
    p.add_argument("--action", help="entries of this action, e.g. TOKEN_ROTATE")


def _channels(sub: Any) -> None:
    channels = noun(sub, "channels", "notification channels: where alerts are sent (owners and admins)")
    channel_id = resource_id("channel")
    p = verb(channels, "create", channels_create, "create a channel; prints its whsec_ signing secret once",
             "create_channel")
    p.add_argument("--name", required=True, help="channel name")
    p.add_argument("--endpoint", required=True, help="URL alerts are POSTed to (checked by the egress policy)")
    p.add_argument("--event", action="append", required=True, choices=CHANNEL_EVENTS,
                   help="an event it hears; repeatable")
    list_verb(channels, channels_list, "list notification channels, oldest first", "list_channels")
    verb(channels, "get", channels_get, "show a channel", "get_channel").add_argument("channel", type=channel_id)
    verb(channels, "delete", channels_delete, "delete a channel and its notifications", "delete_channel").add_argument(
        "channel", type=channel_id)
    verb(channels, "test", channels_test, "queue a ping to a channel (sent and retried like any alert)",
         "test_channel").add_argument("channel", type=channel_id)


def add_commands(sub: Any) -> None:
    """Add ``me``, ``members``, ``keys``, ``audit`` and ``channels``."""
    for add in (_me, _members, _keys, _audit, _channels):
        add(sub)
