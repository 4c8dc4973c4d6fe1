"""Hostile input never gets a 5xx or a stack trace, and a refused request leaves no row.

Random headers, bodies, content types and tokens; "refused" is any 4xx but 401 (a rejected row).
"""

import json
import string

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests import factories
from tests.gateway import ingress_kit as kit

HEADER_NAMES = ["x-github-event", "x-github-delivery", "x-hub-signature-256", "content-length", "x-forwarded-for",
                "idempotency-key", "x-event-type", "stripe-signature", "webhook-id", "x-real-ip"]
CONTENT_TYPES = ["application/json", "application/json; charset=latin-1", "application/x-www-form-urlencoded",
                 "text/plain", "application/vnd.api+json", "multipart/form-data; boundary=x", "", "*/*"]
printable = st.text(alphabet=string.ascii_letters + string.digits + string.punctuation + " ", max_size=60)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.text(max_size=10), json_values, max_size=5).map(lambda v: json.dumps(v).encode()),
    st.text(max_size=100).map(lambda t: ("payload=" + t).encode()),
    st.sampled_from([b'{"a":"\\u0000"}', b'{"a":1e999}', b'\xef\xbb\xbf{"action":"x"}', b'{"a":"\\udc00"}']),
)
tokens = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=0, max_size=60),
    st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=43, max_size=43).map(lambda t: "awt_" + t),
)


@pytest.fixture
async def target(db_url):
    async with kit.app_client(db_url, ip_request_cap=10**9, ip_bad_credential_cap=10**9) as (ctx, client):
        yield await kit.hook(ctx), client, ctx


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=tokens, body=bodies, content_type=st.sampled_from(CONTENT_TYPES),
       extra=st.dictionaries(st.sampled_from(HEADER_NAMES), printable, max_size=4), sign=st.booleans(),
       real=st.integers(0, 3))
async def test_random_requests_never_5xx_and_refusals_leave_no_row(target, token, body, content_type, extra, sign,
                                                                   real):
    hook, client, ctx = target
    path = hook.path if real else "/hooks/" + token  # the live token three times in four
    headers = {"content-type": content_type} if content_type else {}
    headers |= {k: v for k, v in extra.items() if k != "content-length"}
    if sign:
        headers |= kit.github(body)[1] | ({"content-type": content_type} if content_type else {})
    async with ctx.pool.acquire() as conn:
        before = await conn.fetchval("SELECT count(*) FROM webhook_delivery")
        r = await client.post(path, content=body, headers=headers)
        after = await conn.fetchval("SELECT count(*) FROM webhook_delivery")
    event(f"status {r.status_code}")
    assert r.status_code < 500, r.text
    assert "Traceback" not in r.text and "File \"" not in r.text
    answer = r.json()
    assert "error" in answer or "status" in answer or "challenge" in answer
    if r.status_code == 401:
        assert answer["status"] == "rejected" and after == before + 1
    elif r.status_code >= 400:
        assert after == before, (r.status_code, answer)
    else:
        assert answer["status"] in ("accepted", "duplicate", "ignored", "skipped")
        assert after == before + (answer["status"] != "duplicate")



# --- the runtime API, in-process: the same rule (never a 5xx, every error a JSON code) ------------------

runtime_bodies = st.one_of(
    bodies,
    st.integers(1, 3000).map(lambda d: ("[" * d + '"\\u0000"' + "]" * d).encode()),
    st.fixed_dictionaries({}, optional={
        "lease_token": st.one_of(st.uuids().map(str), printable),
        "status": st.sampled_from(["succeeded", "failed", "x"]), "result": json_values, "error": json_values,
        "retry_class": json_values, "instance": json_values,
        "wait_s": st.one_of(st.floats(), st.integers(), st.text(max_size=3)),
    }).map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b'{"instance":"\xed\xb3\xbf"}', b'{"instance":"a\\u0000"}', b"\xef\xbb\xbf{}", b"[]"]),
)


@pytest.fixture
async def runtime_target(db_url):
    async with kit.app_client(db_url, ip_request_cap=10**9, ip_bad_credential_cap=10**9) as (ctx, client):
        agent = await factories.pull_agent(await factories.world(ctx))
        yield client, agent.runtime_token


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=runtime_bodies, op=st.sampled_from(["heartbeat", "claim", "renew", "report"]),
       task=st.one_of(st.uuids().map(str), tokens), auth=st.one_of(st.none(), st.just("valid"), printable),
       content_type=st.sampled_from(CONTENT_TYPES))
@example(body=b'{"instance":"\xed\xb3\xbf"}', op="heartbeat", task="", auth="valid", content_type="application/json")
@example(body=b'{"instance":"a\\u0000"}', op="claim", task="", auth="valid", content_type="")
async def test_random_runtime_requests_never_5xx(runtime_target, body, op, task, auth, content_type):
    client, runtime_token = runtime_target
    path = f"/v1/runtime/{op}" if op in ("heartbeat", "claim") else f"/v1/runtime/tasks/{task}/{op}"
    headers = {"content-type": content_type} if content_type else {}
    if auth is not None:
        headers["authorization"] = f"Bearer {runtime_token}" if auth == "valid" else auth
    if op == "claim" and auth == "valid":
        body = b'{"wait_s": 0}' if body.strip().startswith(b"{") else body  # no long-poll in a property test
    r = await client.post(path, content=body, headers=headers)
    event(f"status {r.status_code}")
    assert r.status_code < 500, r.text
    assert "Traceback" not in r.text and 'File "' not in r.text
    assert r.status_code == 204 or isinstance(r.json(), dict)
