"""``hookgate agents …`` and ``hookgate squads …``: who does the work (the admin API's agents and squads)."""

from __future__ import annotations

import argparse
from typing import Any

from hookgate.admin_client import (
    DEFAULT_SCHEDULE,
    Client,
    list_verb,
    noun,
    request,
    resource_id,
    retry_schedule,
    verb,
)


async def agents_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/agents."""
    runtime = {"kind": "pull"} if a.pull else {"kind": "http", "url": a.endpoint, "timeout_s": a.timeout}
    body = {"name": a.name, "runtime": runtime, "visibility": "private" if a.private else "workspace",
            "max_concurrency": a.max_concurrency}
    if a.retry_schedule not in (None, DEFAULT_SCHEDULE):
        body["retry_schedule"] = a.retry_schedule
    return await c.call("POST", "/v1/agents", json_body=body)


agents_list = request("GET", "/v1/agents", paged=True)
agents_get = request("GET", "/v1/agents/{agent}")


async def agents_update(c: Client, a: argparse.Namespace) -> Any:
    """PATCH /v1/agents/{id} with the fields given (``--retry-schedule default`` sends ``null``)."""
    body = {"name": a.name, "url": a.endpoint, "timeout_s": a.timeout, "max_concurrency": a.max_concurrency,
            "visibility": a.visibility}
    sent: dict[str, Any] = {k: v for k, v in body.items() if v is not None}
    if a.retry_schedule is not None:
        sent["retry_schedule"] = None if a.retry_schedule == DEFAULT_SCHEDULE else a.retry_schedule
    return await c.call("PATCH", f"/v1/agents/{a.agent}", json_body=sent)


agents_rotate_secret = request("POST", "/v1/agents/{agent}/rotate-secret")


agents_archive = request("POST", "/v1/agents/{agent}/archive")


async def squads_create(c: Client, a: argparse.Namespace) -> Any:
    """POST /v1/squads."""
    return await c.call("POST", "/v1/squads", json_body={"name": a.name, "leader_id": a.leader,
                                                         "member_ids": a.member or []})


squads_list = request("GET", "/v1/squads", paged=True)
squads_get = request("GET", "/v1/squads/{squad}")


# -- parser ------------------------------------------------------------------------------------------

def _agents(sub: Any) -> None:
    agents = noun(sub, "agents", "create, list, show, change and archive agents")
    p = verb(agents, "create", agents_create, "create an http agent (--endpoint; prints its whsec_ signing secret "
             "once) or a pull agent (--pull; prints its hgr_ runtime token once)", "create_agent")
    p.add_argument("--name", required=True, help="agent name")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--endpoint", help="URL we push tasks to (http agent)")
    kind.add_argument("--pull", action="store_true", help="a runtime that pulls work with an hgr_ token")
    p.add_argument("--timeout", type=float, default=10.0, help="push timeout in seconds (default 10)")
    p.add_argument("--private", action="store_true", help="only you may assign work to it")
    p.add_argument("--max-concurrency", type=int, default=4, help="tasks at once (default 4)")
    p.add_argument("--retry-schedule", type=retry_schedule, metavar="DELAYS",
                   help="its own delays between attempts, e.g. 5s,1m,1h (n delays: n + 1 attempts); "
                        "default: the gateway's HOOKGATE_PUSH_RETRY_SCHEDULE")
    list_verb(agents, agents_list, "list agents", "list_agents")
    verb(agents, "get", agents_get, "show an agent, its health (state, since, next probe, last error) and "
          "its retry schedule", "get_agent").add_argument("agent", type=resource_id("agent"))
    p = verb(agents, "update", agents_update, "change an agent's name, endpoint, timeout, concurrency, visibility, "
              "retry schedule", "edit_agent")
    p.add_argument("agent", type=resource_id("agent"))
    p.add_argument("--name", help="new name")
    p.add_argument("--endpoint", help="new URL we push tasks to (http agent; checked like at creation)")
    p.add_argument("--timeout", type=float, help="push timeout in seconds (http agent)")
    p.add_argument("--max-concurrency", type=int, help="tasks at once (running ones are never cut)")
    seen = p.add_mutually_exclusive_group()
    seen.add_argument("--private", dest="visibility", action="store_const", const="private",
                      help="only you may assign work to it")
    seen.add_argument("--workspace", dest="visibility", action="store_const", const="workspace",
                      help="every member may assign work to it")
    p.add_argument("--retry-schedule", type=retry_schedule, metavar="DELAYS",
                   help="delays between attempts of its tasks, e.g. 5s,1m,1h (units s, m, h, d; n delays: n + 1 "
                        "attempts); 'default' goes back to the gateway's HOOKGATE_PUSH_RETRY_SCHEDULE")
    verb(agents, "rotate-secret", agents_rotate_secret,
          "give an http agent a new signing secret (shown once); the old one also signs pushes for 24 hours",
          "rotate_agent_secret").add_argument("agent", type=resource_id("agent"))
    verb(agents, "archive", agents_archive, "archive an agent: runs assigned to it are skipped (agent_archived) from "
         "now on", "archive_agent").add_argument("agent", type=resource_id("agent"))


def _squads(sub: Any) -> None:
    squads = noun(sub, "squads", "create, list and show squads (an autopilot assigned to one runs on its leader)")
    p = verb(squads, "create", squads_create, "create a squad of agents led by one of them", "create_squad")
    p.add_argument("--name", required=True, help="squad name")
    p.add_argument("--leader", required=True, type=resource_id("agent"), help="the agent that does the work")
    p.add_argument("--member", action="append", type=resource_id("agent"), help="a member agent; repeatable")
    list_verb(squads, squads_list, "list squads", "list_squads")
    verb(squads, "get", squads_get, "show a squad", "get_squad").add_argument("squad", type=resource_id("squad"))


def add_commands(sub: Any) -> None:
    """Add ``agents`` and ``squads``."""
    _agents(sub)
    _squads(sub)
