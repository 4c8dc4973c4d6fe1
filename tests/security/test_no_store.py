"""No cache keeps an API answer: every ``/v1/`` answer, and first those that carry a credential, is ``no-store``.

The operations are walked from ``/openapi.json``. Those whose answer schema holds a credential field (a key,
signing secret, runtime token, webhook token or lease token) are each called for real, and the answer must
both carry the credential and say ``Cache-Control: no-store``; a new such operation fails the test until it
is walked here too.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests import factories
from tests.security import estate

CREDENTIAL_FIELDS = {"api_key", "signing_secret", "runtime_token", "token", "lease_token"}
CREDENTIAL = re.compile(r'"(?:hgk_|hgr_|whsec_|awt_)[A-Za-z0-9_+/=-]{8,}|"lease_token":"[0-9a-f-]{36}"')


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _holds_credential(doc: dict[str, Any], schema: dict[str, Any], seen: frozenset[str] = frozenset()) -> bool:
    ref = schema.get("$ref", "")
    if ref in seen:
        return False
    schema = _resolve(doc, schema)
    seen = seen | {ref}
    options = [*schema.get("anyOf", []), *schema.get("oneOf", []), *schema.get("allOf", [])]
    if "items" in schema:
        options.append(schema["items"])
    properties = schema.get("properties", {})
    return bool(CREDENTIAL_FIELDS & set(properties)) or any(
        _holds_credential(doc, s, seen) for s in [*options, *properties.values()])


def credential_operations(doc: dict[str, Any]) -> set[str]:
    """``METHOD path`` of every operation one of whose 2xx answers may hold a credential field."""
    found = set()
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            for status, answer in op["responses"].items():
                schemas = [c["schema"] for c in answer.get("content", {}).values()]
                if status.startswith("2") and any(_holds_credential(doc, s) for s in schemas):
                    found.add(f"{method.upper()} {path}")
    return found


@pytest.fixture
async def made(ctx, client) -> estate.Estate:
    return await estate.build(ctx, client, "acme")


def _no_store(answer: httpx.Response) -> None:
    where = (answer.request.method, answer.request.url.path, answer.status_code)
    assert answer.headers.get("cache-control") == "no-store", (*where, answer.headers.get("cache-control"))


async def _pull_agent_with_a_task(client: httpx.AsyncClient, ctx: Any, made: estate.Estate) -> httpx.Response:
    """``POST /v1/agents`` of a pull agent (its answer), given a queued task to claim."""
    answer = await client.post("/v1/agents", headers=made.auth, json={"name": "p2", "runtime": {"kind": "pull"}})
    assert answer.status_code == 201, answer.text
    pilot = await factories.autopilot(made.world, answer.json()["id"], mode="create_issue")
    async with ctx.pool.acquire() as conn:
        await factories.dispatched_run(conn, pilot["id"])
    return answer


async def credential_answers(client: httpx.AsyncClient, ctx: Any, made: estate.Estate) -> dict[str, httpx.Response]:
    """Each operation that hands out a credential, called so that it does, by ``METHOD path``."""
    auth, ids = made.auth, made.ids
    pull = await _pull_agent_with_a_task(client, ctx, made)
    runtime = {"authorization": "Bearer " + pull.json()["runtime_token"]}
    calls = {
        "POST /v1/members": client.post("/v1/members", headers=auth, json={"name": "n", "role": "member"}),
        "POST /v1/members/{member_id}/keys": client.post(f"/v1/members/{ids['member_id']}/keys", headers=auth),
        "POST /v1/agents": client.post("/v1/agents", headers=auth, json={
            "name": "h2", "runtime": {"kind": "http", "url": "http://127.0.0.1:9/"}}),
        "POST /v1/agents/{agent_id}/rotate-secret": client.post(f"/v1/agents/{ids['agent_id']}/rotate-secret",
                                                                headers=auth),
        "POST /v1/notification-channels": client.post("/v1/notification-channels", headers=auth, json={
            "name": "ops2", "url": "http://127.0.0.1:9/a", "events": ["run.failed"]}),
        "POST /v1/autopilots/{autopilot_id}/triggers": client.post(
            f"/v1/autopilots/{ids['autopilot_id']}/triggers", headers=auth, json={"kind": "webhook"}),
        "GET /v1/autopilots/{autopilot_id}/triggers": client.get(f"/v1/autopilots/{ids['autopilot_id']}/triggers",
                                                                 headers=auth),
        "GET /v1/triggers/{trigger_id}": client.get(f"/v1/triggers/{ids['trigger_id']}", headers=auth),
        "PATCH /v1/triggers/{trigger_id}": client.patch(f"/v1/triggers/{ids['trigger_id']}", headers=auth,
                                                        json={"enabled": True}),
        "POST /v1/triggers/{trigger_id}/rotate-token": client.post(f"/v1/triggers/{ids['trigger_id']}/rotate-token",
                                                                   headers=auth),
        "POST /v1/runtime/claim": client.post("/v1/runtime/claim", headers=runtime, json={"wait_s": 0}),
    }
    answers = {name: await call for name, call in calls.items()}
    return answers | {"POST /v1/agents (pull)": pull}


# A deleted trigger's answer never holds its token (only a live trigger's writers see it).
NEVER_A_CREDENTIAL = {"DELETE /v1/triggers/{trigger_id}"}


async def test_every_answer_carrying_a_credential_says_no_store(client, ctx, made):
    doc = (await client.get("/openapi.json")).json()
    answers = await credential_answers(client, ctx, made)
    walked = {name.split(" (")[0] for name in answers}
    assert credential_operations(doc) - NEVER_A_CREDENTIAL == walked, "walk every operation that hands one out"
    for name, answer in answers.items():
        assert answer.status_code in (200, 201), (name, answer.text)
        assert CREDENTIAL.search(answer.text), (name, answer.text[:300])
        _no_store(answer)


async def test_every_api_operation_answers_no_store_whatever_its_status(client, made):
    """Every operation under /v1/ (admin and runtime), as the owner, an anonymous caller and another workspace."""
    doc = (await client.get("/openapi.json")).json()
    outsider = await estate.build(made.world.ctx, client, "globex")
    seen = set()
    for path, operations in doc["paths"].items():
        if not path.startswith("/v1/"):
            continue
        url = re.sub(r"\{(\w+)\}", lambda m: made.ids[m.group(1)], path)
        for method in operations:
            for headers in (made.auth, {}, outsider.auth):
                answer = await client.request(method.upper(), url, headers=headers,
                                              json=None if method in ("get", "delete") else {"wait_s": 0})
                seen.add(answer.status_code)
                _no_store(answer)
    assert {200, 401, 404} <= seen


async def test_the_openapi_document_and_the_ingress_are_not_marked(client, made):
    """The rule is the API's: the public document may be cached, and the ingress is left as it was."""
    assert "cache-control" not in (await client.get("/openapi.json")).headers
    token = next(s for s in made.secrets if s.startswith("awt_"))
    assert "cache-control" not in (await client.post(f"/hooks/{token}x", json={})).headers
