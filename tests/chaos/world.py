"""The chaos run's workspace, made through the admin API as a user would: agents, autopilots, triggers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.chaos.signers import PRESETS, SECRETS


@dataclass
class World:
    """What the load and the agents need: hook URLs per preset, the agents' secrets and tokens."""

    hook_urls: dict[str, list[str]] = field(default_factory=dict)
    push_secret: str = ""
    http_agent_id: str = ""
    runtime_token: str = ""
    schedule_triggers: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # every token, key and secret handed out, for log checks


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(path, json=body)
    answer.raise_for_status()
    return dict(answer.json())


def build(gateways: list[str], api_key: str, agent_url: str, schedules: int) -> World:
    """An http and a pull agent; an autopilot + signed webhook trigger per preset; ``schedules`` cron triggers."""
    world = World()
    with httpx.Client(base_url=gateways[0], headers={"authorization": f"Bearer {api_key}"}, timeout=30) as client:
        http = _post(client, "/v1/agents", {"name": "chaos-http", "max_concurrency": 64,
                                            "runtime": {"kind": "http", "url": agent_url, "timeout_s": 3}})
        pull = _post(client, "/v1/agents", {"name": "chaos-pull", "runtime": {"kind": "pull"}, "max_concurrency": 16})
        world.push_secret, world.runtime_token = http["signing_secret"], pull["runtime_token"]
        world.http_agent_id = http["id"]
        world.secrets += [api_key, world.push_secret, world.runtime_token, *SECRETS.values()]
        for preset in PRESETS:
            agent = pull if preset == "standard" else http
            mode = "create_issue" if preset == "stripe" else "run_only"
            ap = _post(client, "/v1/autopilots", {"title": f"chaos {preset}", "instructions": "chaos",
                                                  "assignee": {"type": "agent", "id": agent["id"]},
                                                  "execution_mode": mode})
            trigger = _post(client, f"/v1/autopilots/{ap['id']}/triggers",
                            {"kind": "webhook", "provider": preset, "rate_limit_per_minute": 1_000_000})
            client.put(f"/v1/triggers/{trigger['id']}/signing-secret",
                       json={"secret": SECRETS[preset]}).raise_for_status()
            world.secrets.append(trigger["token"])
            world.hook_urls[preset] = [f"{g}/hooks/{trigger['token']}" for g in gateways]
        ap = _post(client, "/v1/autopilots", {"title": "chaos cron", "instructions": "every minute",
                                              "assignee": {"type": "agent", "id": http["id"]}})
        for _ in range(schedules):
            trigger = _post(client, f"/v1/autopilots/{ap['id']}/triggers",
                            {"kind": "schedule", "cron": "* * * * *", "overlap_policy": "allow"})
            world.schedule_triggers.append(trigger["id"])
    return world
