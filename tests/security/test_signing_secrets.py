"""Signing secrets as providers issue them: any printable 8–500 characters, spaces included.

GitHub's published test vector (secret ``It's a Secret to Everybody``, body ``Hello, World!``) is checked
against the github preset directly, and end to end: the secret set through the API, the vector's exact
bytes and signature sent to the real ingress (as a form: the body is not JSON, and ingress parses the body
before it checks the signature). A JSON body signed with the same secret is accepted too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid

import httpx
import pytest

from gateway.providers import PRESETS, Inbound
from hookgate.context import Context
from tests import factories

GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


async def _webhook(ctx: Context, client: httpx.AsyncClient, provider: str) -> tuple[factories.World, dict[str, str]]:
    """A workspace, an agent, an autopilot and a webhook trigger made through the admin API."""
    w = await factories.world(ctx)
    agent = await factories.http_agent(w)
    ap = await factories.autopilot(w, agent.row["id"])
    made = await client.post(f"/v1/autopilots/{ap['id']}/triggers", headers=w.auth,
                             json={"kind": "webhook", "provider": provider})
    assert made.status_code == 201, made.text
    return w, made.json()


async def _put_secret(client: httpx.AsyncClient, w: factories.World, trigger_id: str, secret: str) -> httpx.Response:
    return await client.put(f"/v1/triggers/{trigger_id}/signing-secret", headers=w.auth, json={"secret": secret})


def test_githubs_published_vector_verifies_with_the_github_preset():
    inbound = Inbound(raw=GITHUB_BODY, headers={"x-hub-signature-256": GITHUB_SIGNATURE}, body={},
                      url="http://h/hooks/x", now=time.time())
    assert PRESETS["github"].verify(inbound, [GITHUB_SECRET]) == "valid"
    assert PRESETS["github"].verify(inbound, ["It's a Secret to Everybody "]) == "invalid"


async def test_githubs_documented_secret_is_accepted_and_verifies_through_ingress(ctx, client):
    w, trigger = await _webhook(ctx, client, "github")
    put = await _put_secret(client, w, trigger["id"], GITHUB_SECRET)
    assert put.status_code == 200, put.text
    assert put.json() == {"hint": "body"}
    raw = json.dumps({"zen": "Hello, World!"}).encode()
    headers = {"content-type": "application/json", "x-github-event": "ping", "x-github-delivery": str(uuid.uuid4())}
    good = hmac.new(GITHUB_SECRET.encode(), raw, hashlib.sha256).hexdigest()
    signed = headers | {"x-hub-signature-256": f"sha256={good}"}
    accepted = await client.post(trigger["url"], content=raw, headers=signed)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["status"] == "accepted"
    forged = hmac.new(b"It's a Secret to Nobody", raw, hashlib.sha256).hexdigest()
    refused = await client.post(trigger["url"], content=raw, headers=headers | {
        "x-github-delivery": str(uuid.uuid4()), "x-hub-signature-256": f"sha256={forged}"})
    assert refused.status_code == 401, refused.text


async def test_githubs_published_vector_verifies_end_to_end_through_ingress(ctx, client):
    # The vector's body is not JSON, but it is a valid urlencoded form (one field, "Hello, World!"), which is
    # how GitHub sends a webhook set to application/x-www-form-urlencoded: so the vector's exact bytes and
    # signature go through the real ingress, signature check included.
    w, trigger = await _webhook(ctx, client, "github")
    assert (await _put_secret(client, w, trigger["id"], GITHUB_SECRET)).status_code == 200
    form = {"content-type": "application/x-www-form-urlencoded", "x-github-event": "ping"}
    answer = await client.post(trigger["url"], content=GITHUB_BODY, headers=form | {
        "x-github-delivery": str(uuid.uuid4()), "x-hub-signature-256": GITHUB_SIGNATURE})
    assert answer.status_code == 200 and answer.json()["status"] == "accepted", answer.text
    one_bit_off = GITHUB_SIGNATURE[:-1] + "f"
    refused = await client.post(trigger["url"], content=GITHUB_BODY, headers=form | {
        "x-github-delivery": str(uuid.uuid4()), "x-hub-signature-256": one_bit_off})
    assert refused.status_code == 401 and refused.json()["status"] == "rejected", refused.text


@pytest.mark.parametrize("secret", [
    "a" * 8, "x" * 500, "  spaced out  ", "pünktlich-geheim", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "5ba2a4d4c1c9e8f7a6b5c4d3e2f1a0b9",
])
async def test_any_printable_secret_of_8_to_500_characters_is_accepted(ctx, client, secret):
    w, trigger = await _webhook(ctx, client, "generic")
    put = await _put_secret(client, w, trigger["id"], secret)
    assert put.status_code == 200, put.text
    assert put.json() == {"hint": secret[-4:]}


@pytest.mark.parametrize(("secret", "why"), [
    ("s" * 7, "too short"), ("s" * 501, "too long"), ("secret\x07bell", "control character"),
    ("two\nlines-secret", "newline"), ("tab\tseparated", "tab"), ("null\x00byte-secret", "NUL"),
    ("del\x7fcharacter", "DEL"), ("non\u00a0breaking-space", "no-break space"),
])
async def test_a_short_long_or_non_printable_secret_is_refused_with_422(ctx, client, secret, why):
    w, trigger = await _webhook(ctx, client, "github")
    put = await _put_secret(client, w, trigger["id"], secret)
    assert put.status_code == 422, (why, put.text)
    assert put.json()["error"] == "invalid_request"
    assert secret not in put.text


async def test_a_gitlab_token_with_surrounding_spaces_verifies_as_gitlab_sends_it(ctx, client):
    # HTTP drops a header value's surrounding spaces, so GitLab's X-Gitlab-Token can never carry them.
    w, trigger = await _webhook(ctx, client, "gitlab")
    assert (await _put_secret(client, w, trigger["id"], " my gitlab token ")).status_code == 200
    answer = await client.post(trigger["url"], json={"object_kind": "push"}, headers={
        "x-gitlab-event": "Push Hook", "x-gitlab-event-uuid": str(uuid.uuid4()), "x-gitlab-token": "my gitlab token"})
    assert answer.status_code == 200 and answer.json()["status"] == "accepted", answer.text
