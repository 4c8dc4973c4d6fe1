"""Handshakes at the ingress: each provider's documented request answered, nothing stored, the step order kept."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopilot import rules
from gateway import handshakes, schemes
from tests.gateway import ingress_kit as kit

META_TOKEN = "meatyhamhock"  # Meta's own example verify token
ZOOM_SECRET = "zoom-secret-token-123"


async def _stored(conn) -> tuple[int, int]:
    return (await conn.fetchval("SELECT count(*) FROM webhook_delivery"),
            await conn.fetchval("SELECT count(*) FROM autopilot_run"))


async def _meta(ctx, token: str | None = META_TOKEN, **kw: Any) -> kit.Hook:
    h = await kit.hook(ctx, "meta", "meta-app-secret", **kw)
    if token is not None:
        async with ctx.pool.acquire() as conn:
            await rules.set_verify_token(conn, ctx.keyring, h.trigger["id"], token)
    return h


def _meta_query(token: str = META_TOKEN, challenge: str = "1158201444", mode: str = "subscribe") -> str:
    return "?" + urlencode({"hub.mode": mode, "hub.challenge": challenge, "hub.verify_token": token})


async def test_meta_get_with_the_verify_token_is_answered_its_challenge_and_stores_nothing(ctx, client, conn):
    # Meta's documented check: GET ?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhock
    h = await _meta(ctx)
    r = await client.get(h.path + _meta_query())
    assert (r.status_code, r.text) == (200, "1158201444")
    assert r.headers["content-type"].startswith("text/plain") and r.headers["x-content-type-options"] == "nosniff"
    assert await _stored(conn) == (0, 0)


@pytest.mark.parametrize(("query", "status", "code"), [
    (_meta_query(token="meatyhamhocks"), 403, "verify_token_mismatch"),
    (_meta_query(token=""), 403, "verify_token_mismatch"),
    ("?hub.mode=subscribe&hub.challenge=1", 403, "verify_token_mismatch"),
    (_meta_query(mode="unsubscribe"), 400, "invalid_handshake"),
    ("?hub.mode=subscribe&hub.verify_token=meatyhamhock", 400, "invalid_handshake"),
    ("?hub.challenge=%ff", 400, "invalid_handshake"),
])
async def test_meta_get_that_is_not_the_subscription_check_is_refused_with_a_code(ctx, client, conn, query, status,
                                                                                 code):
    h = await _meta(ctx)
    r = await client.get(h.path + query)
    assert (r.status_code, r.json()["error"]) == (status, code)
    assert await _stored(conn) == (0, 0)


async def test_meta_trigger_without_a_verify_token_says_so(ctx, client, conn):
    h = await _meta(ctx, token=None)
    r = await client.get(h.path + _meta_query())
    assert (r.status_code, r.json()["error"]) == (409, "handshake_needs_verify_token")


async def test_verify_tokens_are_compared_in_constant_time_over_equal_length_digests(monkeypatch):
    compared: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(handshakes.hmac, "compare_digest", spy)
    for given_token in ("x", META_TOKEN[:-1], META_TOKEN, META_TOKEN * 10):
        answer = handshakes.answer_get(handshakes.parse_handshake({"kind": "meta"}),
                                       _meta_query(token=given_token)[1:].encode(), META_TOKEN)
        assert answer.status == (200 if given_token == META_TOKEN else 403)
    assert compared == [(32, 32)] * 4  # the same work whatever the given token's length or prefix


@given(a=st.text(max_size=40), b=st.text(max_size=40))
def test_the_verify_token_comparison_is_equality(a: str, b: str) -> None:
    assert handshakes._same(a, b) == (a == b)


async def test_dropbox_challenge_is_echoed_as_plain_text_and_stores_nothing(ctx, client, conn):
    h = await kit.hook(ctx, "dropbox", "dropbox-app-secret")  # the preset's handshake: echo ?challenge=
    r = await client.get(h.path + "?challenge=cK3wTw0vPkWsQGZbrhFhUQ")
    assert (r.status_code, r.text) == (200, "cK3wTw0vPkWsQGZbrhFhUQ")
    assert r.headers["content-type"].startswith("text/plain") and r.headers["x-content-type-options"] == "nosniff"
    missing = await client.get(h.path)
    assert (missing.status_code, missing.json()["error"]) == (400, "invalid_handshake")
    assert await _stored(conn) == (0, 0)


async def test_microsoft_graph_validation_token_is_echoed_on_a_post(ctx, client, conn):
    # Graph POSTs ?validationToken=… (text/plain, empty body) and wants it back, URL-decoded, as text/plain.
    h = await kit.hook(ctx, "generic", None, handshake={"kind": "echo_query", "param": "validationToken"})
    r = await client.post(h.path + "?validationToken=Validation%3A%20Testing%20client%20application",
                          content=b"", headers={"content-type": "text/plain; charset=utf-8"})
    assert (r.status_code, r.text) == (200, "Validation: Testing client application")
    assert await _stored(conn) == (0, 0)
    notification = await client.post(h.path, json={"value": [{"changeType": "created"}]})
    assert notification.json()["status"] == "accepted"  # without the parameter: a delivery as usual


def _zoom(body: dict[str, Any], secret: str = ZOOM_SECRET, ts: int | None = None) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    stamp = str(ts or int(time.time()))
    mac = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + raw, hashlib.sha256).hexdigest()
    return raw, {"content-type": "application/json", "x-zm-request-timestamp": stamp, "x-zm-signature": "v0=" + mac}


ZOOM_VALIDATION = {"payload": {"plainToken": "qgg8vlvZRS6UYooatFL8Aw"}, "event_ts": 1654503849680,
                   "event": "endpoint.url_validation"}  # Zoom's documented example


async def test_zoom_url_validation_is_answered_with_the_hmac_of_the_plain_token(ctx, client, conn):
    h = await kit.hook(ctx, "zoom", ZOOM_SECRET)
    raw, headers = _zoom(ZOOM_VALIDATION)
    r = await client.post(h.path, content=raw, headers=headers)
    expected = hmac.new(ZOOM_SECRET.encode(), b"qgg8vlvZRS6UYooatFL8Aw", hashlib.sha256).hexdigest()
    assert r.status_code == 200 and r.json() == {"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": expected}
    assert await _stored(conn) == (0, 0)
    forged = await client.post(h.path, content=raw, headers=_zoom(ZOOM_VALIDATION, "a guess")[1])
    stale = await client.post(h.path, content=raw, headers=_zoom(ZOOM_VALIDATION, ts=int(time.time()) - 3600)[1])
    assert [(a.status_code, a.json()["error"]) for a in (forged, stale)] == [
        (401, "invalid_signature"), (401, "expired_timestamp")]
    assert await _stored(conn) == (0, 0)
    event = await client.post(h.path, content=_zoom({"event": "meeting.started"})[0],
                              headers=_zoom({"event": "meeting.started"})[1])
    assert event.json()["status"] == "accepted"


async def test_zoom_validation_without_a_secret_needs_one(ctx, client, conn):
    h = await kit.hook(ctx, "zoom", None)
    raw, headers = _zoom(ZOOM_VALIDATION)
    r = await client.post(h.path, content=raw, headers=headers)
    assert (r.status_code, r.json()["error"]) == (409, "handshake_needs_secret")
    assert await _stored(conn) == (0, 0)


def _discord_key() -> tuple[ed25519.Ed25519PrivateKey, str]:
    private = ed25519.Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    return private, public


def _discord(private: ed25519.Ed25519PrivateKey, body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    raw, stamp = json.dumps(body).encode(), str(int(time.time()))
    return raw, {"content-type": "application/json", "x-signature-timestamp": stamp,
                 "x-signature-ed25519": private.sign(stamp.encode() + raw).hex()}


PING = {"id": "1", "application_id": "2", "type": 1, "token": "t", "version": 1}


async def test_discord_ping_is_answered_only_after_its_signature_verified(ctx, client, conn):
    private, public = _discord_key()
    h = await kit.hook(ctx, "discord", schemes.public_key_text(public, "ed25519"))
    raw, headers = _discord(private, PING)
    r = await client.post(h.path, content=raw, headers=headers)
    assert (r.status_code, r.json()) == (200, {"type": 1})
    # Discord's own probe before it saves the URL: a PING with a bad signature must be 401.
    bad = await client.post(h.path, content=raw, headers=_discord(_discord_key()[0], PING)[1])
    unsigned = await client.post(h.path, content=raw, headers={"content-type": "application/json"})
    assert [(a.status_code, a.json()["error"]) for a in (bad, unsigned)] == [
        (401, "invalid_signature"), (401, "missing_signature")]
    assert await _stored(conn) == (0, 0)
    command = {"id": "3", "type": 2, "data": {"name": "deploy"}}
    raw, headers = _discord(private, command)
    assert (await client.post(h.path, content=raw, headers=headers)).json()["status"] == "accepted"


async def test_discord_ping_without_a_public_key_needs_one(ctx, client, conn):
    h = await kit.hook(ctx, "discord", None)
    r = await client.post(h.path, json={"type": 1})
    assert (r.status_code, r.json()["error"]) == (409, "handshake_needs_secret")
    assert await _stored(conn) == (0, 0)


async def test_slack_url_verification_with_a_bad_signature_is_401_and_stores_nothing(ctx, client, conn):
    h = await kit.hook(ctx, "slack", "slack-signing-secret")
    raw, headers = kit.slack_signed({"type": "url_verification", "challenge": "c1"}, "another secret")
    r = await client.post(h.path, content=raw, headers=headers)
    assert (r.status_code, r.json()["error"]) == (401, "invalid_signature")
    assert await _stored(conn) == (0, 0)


async def test_a_trigger_may_turn_its_presets_handshake_off(ctx, client, conn):
    h = await kit.hook(ctx, "dropbox", None, handshake={"kind": "none"})
    r = await client.get(h.path + "?challenge=abc")
    assert (r.status_code, r.json()["error"]) == (405, "method_not_allowed")


async def test_get_on_a_trigger_without_a_get_handshake_is_405_json(ctx, client, conn):
    h = await kit.hook(ctx, "github")
    r = await client.get(h.path + "?hub.mode=subscribe")
    assert (r.status_code, r.json()["error"]) == (405, "method_not_allowed")
    assert await _stored(conn) == (0, 0)


# --- the step order: rate debt and the token come first -------------------------------------------------

async def test_an_unknown_token_is_404_before_any_handshake(ctx, client, conn):
    await _meta(ctx)
    r = await client.get("/hooks/awt_" + "x" * 43 + _meta_query())
    assert r.status_code == 404 and r.json()["error"] == "not_found"


async def test_rate_debt_answers_before_the_handshake_and_wrong_tokens_earn_debt(db_url):
    async with kit.app_client(db_url, ip_bad_credential_cap=3) as (ctx, client):
        h = await _meta(ctx)
        wrong = [await client.get(h.path + _meta_query(token=f"guess-{n}-xx")) for n in range(3)]
        assert [r.status_code for r in wrong] == [403, 403, 403]
        right = await client.get(h.path + _meta_query())
        assert right.status_code == 429 and right.json()["error"] == "rate_limited"  # before the handshake


async def test_a_paused_or_deleted_trigger_answers_no_handshake(ctx, client, conn):
    h = await _meta(ctx)
    await conn.execute("UPDATE autopilot_trigger SET deleted_at = now() WHERE id = $1", h.trigger["id"])
    r = await client.get(h.path + _meta_query())
    assert r.status_code == 404


# --- a handshake never stores a delivery ----------------------------------------------------------------

@pytest.fixture
async def shaking(db_url):
    async with kit.app_client(db_url, ip_request_cap=10**9, ip_bad_credential_cap=10**9) as (ctx, client):
        private, public = _discord_key()
        hooks = {"meta": await _meta(ctx, workspace="meta"),
                 "zoom": await kit.hook(ctx, "zoom", ZOOM_SECRET, workspace="zoom"),
                 "discord": await kit.hook(ctx, "discord", schemes.public_key_text(public, "ed25519"),
                                           workspace="discord"),
                 "dropbox": await kit.hook(ctx, "dropbox", None, workspace="dropbox"),
                 "slack": await kit.hook(ctx, "slack", "slack-secret", workspace="slack")}
        yield hooks, private, client, ctx


def _handshake_request(kind: str, private: ed25519.Ed25519PrivateKey, text: str, signed: bool,
                       token: str) -> tuple[str, str, bytes, dict[str, str]]:
    """(method, query, body, headers) of a handshake of ``kind``, signed or not, with ``text`` as its challenge."""
    if kind == "meta":
        return "GET", _meta_query(token=token, challenge=text), b"", {}
    if kind == "dropbox":
        return "GET", "?" + urlencode({"challenge": text}), b"", {}
    if kind == "zoom":
        body = {"event": "endpoint.url_validation", "payload": {"plainToken": text}}
        raw, headers = _zoom(body, ZOOM_SECRET if signed else token or "x")
    elif kind == "discord":
        raw, headers = _discord(private if signed else _discord_key()[0], {"type": 1, "id": text})
    else:
        raw, headers = kit.slack_signed({"type": "url_verification", "challenge": text},
                                        "slack-secret" if signed else token or "x")
    return "POST", "", raw, headers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["meta", "zoom", "discord", "dropbox", "slack"]), text=st.text(max_size=80),
       signed=st.booleans(), token=st.sampled_from([META_TOKEN, "not-the-token", ""]))
async def test_a_handshake_never_stores_a_delivery(shaking, kind, text, signed, token):
    hooks, private, client, ctx = shaking
    method, query, raw, headers = _handshake_request(kind, private, text, signed, token)
    r = await client.request(method, hooks[kind].path + query, content=raw, headers=headers)
    assert r.status_code < 500, r.text
    async with ctx.pool.acquire() as conn:
        assert await _stored(conn) == (0, 0), (kind, r.status_code, r.text)


async def test_a_handshake_is_counted_as_its_own_outcome(ctx, client, conn):
    from hookgate import metrics

    h = await _meta(ctx)
    series = metrics.INGRESS_REQUESTS.labels("handshake", "meta")
    before = series._value.get()
    assert (await client.get(h.path + _meta_query())).status_code == 200
    assert series._value.get() == before + 1
