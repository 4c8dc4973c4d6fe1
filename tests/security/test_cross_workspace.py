"""Another workspace's ids are 404 on every admin route that takes an id, and never show up in its lists."""

from __future__ import annotations

import re

import pytest

from gateway import admin
from tests.security import estate

ID_ROUTES = [e for e in admin.ENDPOINTS if "{" in e.path]
LIST_ROUTES = [e for e in admin.ENDPOINTS if e.method == "GET" and "{" not in e.path and e.path != "/v1/me"]


# A valid body per write route, so the answer comes from the id lookup and not from validation.
BODIES = {
    "/v1/autopilots/{autopilot_id}": {"title": "stolen"},
    "/v1/autopilots/{autopilot_id}/collaborators": {"member_id": None},  # the intruder's own member
    "/v1/autopilots/{autopilot_id}/triggers": {"kind": "webhook"},
    "/v1/triggers/{trigger_id}": {"enabled": False},
    "/v1/triggers/{trigger_id}/signing-secret": {"secret": "a-secret-of-enough-length"},
    "/v1/triggers/{trigger_id}/filter-test": {"payload": {"action": "opened"}},
    "/v1/issues/{issue_id}": {"status": "done"},
}


def _body(path: str, intruder: estate.Estate) -> dict[str, object]:
    body = dict(BODIES.get(path, {}))
    return {k: intruder.ids["member_id"] if v is None else v for k, v in body.items()}


def _fill(path: str, ids: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], path)


@pytest.fixture
async def two(ctx, client):
    victim = await estate.build(ctx, client, "victim")
    intruder = await estate.build(ctx, client, "intruder")
    return victim, intruder


async def test_every_id_route_answers_404_for_another_workspaces_ids(client, two):
    victim, intruder = two
    assert len(ID_ROUTES) >= 30
    for endpoint in ID_ROUTES:
        path = _fill(endpoint.path, victim.ids)
        body = None if endpoint.method in ("GET", "DELETE") else _body(endpoint.path, intruder)
        answer = await client.request(endpoint.method, path, headers=intruder.auth, json=body)
        assert answer.status_code == 404, (endpoint.method, endpoint.path, answer.status_code, answer.text)
        assert answer.json()["error"] == "not_found"
    # The victim's own objects are untouched and still answer the victim.
    for name in ("autopilot", "trigger", "run"):
        own = await client.get(f"/v1/{name}s/{victim.ids[name + '_id']}", headers=victim.auth)
        assert own.status_code == 200, own.text


async def test_lists_and_filters_never_show_another_workspaces_rows(client, two):
    victim, intruder = two
    filters = {"autopilot_id": victim.ids["autopilot_id"], "trigger_id": victim.ids["trigger_id"],
               "agent_id": victim.ids["agent_id"], "subject_id": victim.ids["autopilot_id"]}
    for endpoint in LIST_ROUTES:
        answer = await client.get(endpoint.path, headers=intruder.auth, params=filters)
        assert answer.status_code in (200, 422), (endpoint.path, answer.text)
        for value in victim.ids.values():
            assert value not in answer.text, (endpoint.path, value)


async def test_runtime_api_refuses_another_workspaces_task(client, ctx, two):
    victim, intruder = two
    token = next(s for s in intruder.secrets if s.startswith("hgr_"))
    for verb in ("renew", "report"):
        answer = await client.post(f"/v1/runtime/tasks/{victim.ids['task_id']}/{verb}",
                                   headers={"authorization": f"Bearer {token}"},
                                   json={"lease_token": "00000000-0000-0000-0000-000000000000", "status": "succeeded"})
        assert answer.status_code == 404, (verb, answer.text)
