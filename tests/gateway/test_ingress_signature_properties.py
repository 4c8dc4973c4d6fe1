"""Random signature headers for every signed preset never pass, never 5xx, and are never deduplicated.

Extends ``test_ingress_properties`` (github only) to stripe, slack, standard, shopify and linear: forged
signature and timestamp headers of every shape are 401 with a rejected row, and odd token shapes are 404.
"""

from __future__ import annotations

import json
import string
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway import ingress_kit as kit

SIGNED = {
    "stripe": ["stripe-signature"],
    "slack": ["x-slack-signature", "x-slack-request-timestamp"],
    "standard": ["webhook-id", "webhook-timestamp", "webhook-signature"],
    "shopify": ["x-shopify-hmac-sha256"],
    "linear": ["linear-signature"],
}
now = int(time.time())
stamps = st.one_of(st.integers(now - 1000, now + 1000).map(str), st.integers().map(str), st.text(max_size=12))
values = st.one_of(
    st.text(alphabet=string.printable.strip() + " ", max_size=120),
    st.builds(lambda t, v: f"t={t},v1={v}", stamps, st.text(alphabet="0123456789abcdef", max_size=64)),
    st.builds(lambda v: f"v1,{v}", st.text(alphabet=string.ascii_letters + string.digits + "+/=", max_size=60)),
    st.builds(lambda v: f"v0={v}", st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)),
    stamps,
)
odd_tokens = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=40, max_size=46).map(lambda t: "awt_" + t),
    st.text(min_size=1, max_size=50).filter(lambda t: t.isprintable() and "/" not in t and "?" not in t
                                            and "#" not in t).map(lambda t: "awt_" + t),
    st.sampled_from(["awt_", "AWT_" + "a" * 43, "awt_" + "a" * 43 + "%00", "awt_" + "é" * 43, "hgk_" + "a" * 43]),
)


@pytest.fixture
async def hooks(db_url):
    async with kit.app_client(db_url, ip_request_cap=10**9, ip_bad_credential_cap=10**9) as (ctx, client):
        made = {}
        for n, preset in enumerate(SIGNED):
            secret = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQ=" if preset == "standard" else "s3cret"
            made[preset] = await kit.hook(ctx, preset, secret, workspace=f"ws{n}")
        yield made, client, ctx


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(preset=st.sampled_from(sorted(SIGNED)), headers=st.data(),
       body_id=st.text(alphabet=string.ascii_letters + string.digits + " -_.", max_size=20))
async def test_forged_signature_headers_are_rejected_never_accepted(hooks, preset, headers, body_id):
    made, client, ctx = hooks
    sent = {name: headers.draw(values) for name in SIGNED[preset] if headers.draw(st.booleans())}
    sent = {k: v for k, v in sent.items() if v.isprintable() and v.isascii()}
    body = json.dumps({"id": body_id, "type": "x.y", "event_id": "e", "webhookTimestamp": now * 1000})
    answer = await client.post(made[preset].path, content=body.encode(),
                               headers={"content-type": "application/json", **sent})
    assert answer.status_code == 401, (preset, sent, answer.text)
    assert answer.json()["status"] == "rejected" and "Traceback" not in answer.text
    row = await ctx.pool.fetchrow("SELECT status, signature_status FROM webhook_delivery WHERE id = $1::uuid",
                                  answer.json()["delivery_id"])
    assert row["status"] == "rejected" and row["signature_status"] in ("invalid", "missing", "expired")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=odd_tokens)
async def test_odd_token_shapes_are_the_same_404(hooks, token):
    _, client, _ = hooks
    answer = await client.post("/hooks/" + token, content=b"{}", headers={"content-type": "application/json"})
    assert answer.status_code == 404 and answer.content == kit_not_found()


def kit_not_found() -> bytes:
    from gateway.ingress.endpoint import NOT_FOUND

    return NOT_FOUND
