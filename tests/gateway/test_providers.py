"""Provider presets: published vectors, agreement with the providers' SDKs, the known traps, properties."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
import standardwebhooks
import stripe
from hypothesis import given, settings
from hypothesis import strategies as st
from slack_sdk.signature import Clock, SignatureVerifier
from twilio.request_validator import RequestValidator

from gateway.envelope import Payload, parse_body
from gateway.providers import (
    DEFAULT_EVENT,
    PRESETS,
    Inbound,
    Preset,
    get_preset,
    selected_headers,
    slack_challenge,
)

NOW = 1_700_000_000
URL = "https://hooks.example.com/hooks/awt_abc"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
STATUSES = {"not_required", "valid", "invalid", "missing", "expired"}
STD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def inbound(
    raw: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    content_type: str | None = JSON,
    body: Payload | None = None,
    url: str = URL,
    now: float = NOW,
) -> Inbound:
    """A request as the ingress would build it: lower-cased headers, body parsed by the envelope."""
    lowered = {name.lower(): value for name, value in (headers or {}).items()}
    if content_type is not None:
        lowered.setdefault("content-type", content_type)
    if body is None:
        body = parse_body(raw, lowered.get("content-type"))
    return Inbound(raw=raw, headers=lowered, body=body, url=url, now=now)


def hex_mac(secret: str | bytes, message: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def b64_mac(secret: str, message: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()).decode()


# -- signers: how each provider would sign `raw`, using the provider's own SDK where there is one ------------

Signed = tuple[dict[str, str], str]  # headers, url


def sign_hub(raw: bytes, secret: str, ts: int) -> Signed:
    return {"X-Hub-Signature-256": "sha256=" + hex_mac(secret, raw)}, URL


def sign_gitlab(raw: bytes, secret: str, ts: int) -> Signed:
    return {"X-Gitlab-Token": secret}, URL


def sign_stripe(raw: bytes, secret: str, ts: int) -> Signed:
    return {
        "Stripe-Signature": stripe.WebhookSignature.generate_signature_header(raw.decode(), secret, ts)
    }, URL


def sign_slack(raw: bytes, secret: str, ts: int) -> Signed:
    signature = SignatureVerifier(secret).generate_signature(timestamp=str(ts), body=raw)
    assert signature is not None
    return {"X-Slack-Signature": signature, "X-Slack-Request-Timestamp": str(ts)}, URL


def sign_shopify(raw: bytes, secret: str, ts: int) -> Signed:
    return {"X-Shopify-Hmac-Sha256": b64_mac(secret, raw)}, URL


def sign_standard(raw: bytes, secret: str, ts: int) -> Signed:
    signature = standardwebhooks.Webhook(secret).sign("msg_1", datetime.fromtimestamp(ts, UTC), raw.decode())
    return {"webhook-id": "msg_1", "webhook-timestamp": str(ts), "webhook-signature": signature}, URL


def sign_linear(raw: bytes, secret: str, ts: int) -> Signed:
    return {"Linear-Signature": hex_mac(secret, raw)}, URL  # its timestamp travels in the body


def sign_twilio(raw: bytes, secret: str, ts: int) -> Signed:
    url = f"{URL}?bodySHA256={hashlib.sha256(raw).hexdigest()}"
    return {"X-Twilio-Signature": RequestValidator(secret).compute_signature(url, {})}, url


SIGNERS: dict[str, Callable[[bytes, str, int], Signed]] = {
    "generic": sign_hub,
    "github": sign_hub,
    "gitlab": sign_gitlab,
    "stripe": sign_stripe,
    "slack": sign_slack,
    "shopify": sign_shopify,
    "standard": sign_standard,
    "linear": sign_linear,
    "twilio": sign_twilio,
}
SECRETS = {name: STD_SECRET if name == "standard" else "s3cret-current" for name in SIGNERS}
OLD_SECRETS = {
    name: "whsec_b2xkLXNlY3JldC1ieXRlcw==" if name == "standard" else "s3cret-old" for name in SIGNERS
}
BODY_SIGNED = sorted(set(SIGNERS) - {"gitlab"})  # GitLab's token is a shared password, not a body MAC
TIMESTAMPED = ["stripe", "slack", "standard"]


def body_at(ts_ms: int | str | None = NOW * 1000) -> bytes:
    fields: dict[str, object] = {"id": "evt_1", "type": "thing.happened", "action": "create"}
    if ts_ms is not None:
        fields["webhookTimestamp"] = ts_ms
    return json.dumps(fields).encode()


def signed(name: str, raw: bytes | None = None, secret: str | None = None, ts: int = NOW) -> Inbound:
    raw = body_at() if raw is None else raw
    headers, url = SIGNERS[name](raw, secret or SECRETS[name], ts)
    return inbound(raw, headers, url=url)


def verify(name: str, req: Inbound, secrets: list[str] | None = None) -> str:
    return get_preset(name).verify(req, [SECRETS[name]] if secrets is None else secrets)


def test_presets_are_exactly_the_design_table() -> None:
    expected = {"generic", "github", "gitlab", "stripe", "slack", "shopify", "standard", "linear", "twilio"}
    assert set(PRESETS) == expected
    assert all(preset.name == name for name, preset in PRESETS.items())


def test_unknown_preset_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown provider preset 'bitbucket'"):
        get_preset("bitbucket")


def test_presets_mapping_is_read_only() -> None:
    with pytest.raises(TypeError):
        PRESETS["evil"] = PRESETS["generic"]  # type: ignore[index]


# -- published test vectors ----------------------------------------------------------------------------------


def test_github_docs_vector() -> None:
    # docs.github.com, "Validating webhook deliveries": secret, payload and expected signature.
    secret, raw = "It's a Secret to Everybody", b"Hello, World!"
    expected = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert hex_mac(secret, raw) == expected
    req = inbound(raw, {"X-Hub-Signature-256": f"sha256={expected}"}, content_type="text/plain", body={})
    assert get_preset("github").verify(req, [secret]) == "valid"
    assert get_preset("generic").verify(req, [secret]) == "valid"
    assert get_preset("github").verify(req, ["It's a secret to everybody"]) == "invalid"


SLACK_VECTOR_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
    b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)


def slack_vector(now: float = 1531420618) -> Inbound:
    # docs.slack.dev, "Verifying requests from Slack": a slash command, signed over the raw form body.
    headers = {
        "X-Slack-Request-Timestamp": "1531420618",
        "X-Slack-Signature": "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
    }
    return inbound(SLACK_VECTOR_BODY, headers, content_type=FORM, now=now)


def test_slack_docs_vector() -> None:
    req = slack_vector()
    assert get_preset("slack").verify(req, ["8f742231b10e8888abcd99yyyzzz85a5"]) == "valid"
    assert get_preset("slack").event(req) == "slack.slash_command"
    assert isinstance(req.body, dict) and req.body["command"] == "/webhook-collect"


def test_slack_docs_vector_is_expired_years_later() -> None:
    assert (
        get_preset("slack").verify(slack_vector(now=NOW), ["8f742231b10e8888abcd99yyyzzz85a5"]) == "expired"
    )


TWILIO_PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+12349013030",
    "Digits": "1234",
    "From": "+12349013030",
    "To": "+18005551212",
}


def test_twilio_docs_vector() -> None:
    # twilio.com/docs/usage/security: auth token 12345, this URL and these params.
    url, expected = "https://mycompany.com/myapp.php?foo=1&bar=2", "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    assert RequestValidator("12345").compute_signature(url, TWILIO_PARAMS) == expected
    raw = urlencode(list(reversed(TWILIO_PARAMS.items()))).encode()  # Twilio sorts; body order is free
    req = inbound(raw, {"X-Twilio-Signature": expected}, content_type=FORM, url=url)
    assert get_preset("twilio").verify(req, ["12345"]) == "valid"
    assert get_preset("twilio").verify(req, ["12346"]) == "invalid"


def standard_vector(headers: dict[str, str]) -> Inbound:
    return inbound(b'{"test": 2432232314}', headers, now=1614265330)


@pytest.mark.parametrize("prefix", ["webhook", "svix"])
@pytest.mark.parametrize(
    "signature",
    [
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",  # only the last one matches
        "v1a,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",  # other versions are skipped
    ],
)
def test_standard_webhooks_spec_vector(prefix: str, signature: str) -> None:
    # standard-webhooks spec and reference libraries: secret, id, timestamp, payload, signature.
    req = standard_vector(
        {
            f"{prefix}-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
            f"{prefix}-timestamp": "1614265330",
            f"{prefix}-signature": signature,
        }
    )
    assert get_preset("standard").verify(req, [STD_SECRET]) == "valid"
    assert get_preset("standard").verify(req, [STD_SECRET.removeprefix("whsec_")]) == "valid"


def test_standard_webhooks_vector_matches_the_reference_library() -> None:
    signature = standardwebhooks.Webhook(STD_SECRET).sign(
        "msg_p5jXN8AQM9LWM0D4loKWxJek", datetime.fromtimestamp(1614265330, UTC), '{"test": 2432232314}'
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


# -- agreement with the providers' SDKs ----------------------------------------------------------------------


def stripe_cases(secret: str, now: int) -> Iterator[tuple[str, bytes, str]]:
    payload = b'{"id": "evt_1", "object": "event", "type": "invoice.paid"}'

    def header(key: str, stamp: int) -> str:
        return str(stripe.WebhookSignature.generate_signature_header(payload.decode(), key, stamp))

    good = header(secret, now)
    sig = good.split("v1=")[1]
    yield "good", payload, good
    yield "wrong secret", payload, header("whsec_other", now)
    yield "body re-serialised", b'{"id":"evt_1","object":"event","type":"invoice.paid"}', good
    yield "body tampered", payload.replace(b"paid", b"void"), good
    yield "301 s old", payload, header(secret, now - 301)
    yield "290 s old", payload, header(secret, now - 290)  # not 300: the SDK reads the real clock
    yield "last v1 matches", payload, f"t={now},v1={'0' * 64},v1=deadbeef,v1={sig}"
    yield "only v0", payload, f"t={now},v0={sig}"
    yield "no timestamp", payload, f"v1={sig}"
    yield "timestamp not a number", payload, f"t=now,v1={sig}"
    yield "garbage", payload, "not a stripe header"


def stripe_accepts(payload: bytes, header: str, secret: str) -> bool:
    try:
        stripe.Webhook.construct_event(payload, header, secret, tolerance=300)
    except stripe.SignatureVerificationError:
        return False
    return True


@pytest.mark.parametrize("case", [case for case, _, _ in stripe_cases("whsec_x", NOW)])
def test_stripe_accepts_exactly_what_the_stripe_sdk_accepts(case: str) -> None:
    secret, now = "whsec_test_" + "a" * 32, int(time.time())
    _, payload, header = next(c for c in stripe_cases(secret, now) if c[0] == case)
    ours = get_preset("stripe").verify(inbound(payload, {"Stripe-Signature": header}, now=now), [secret])
    assert (ours == "valid") == stripe_accepts(payload, header, secret)
    assert ours != "valid" or case in ("good", "290 s old", "last v1 matches")


def test_stripe_rejects_future_timestamps_which_its_sdk_would_accept() -> None:
    # The SDK only bounds the past; Hookgate keeps 5 minutes both ways (docs/PROVIDERS.md).
    assert verify("stripe", signed("stripe", ts=NOW + 301)) == "expired"
    assert verify("stripe", signed("stripe", ts=NOW + 300)) == "valid"


class FixedClock(Clock):
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


@pytest.mark.parametrize(
    ("case", "mutate"),
    [
        ("good", lambda h, raw: (h, raw)),
        ("wrong signature", lambda h, raw: ({**h, "X-Slack-Signature": "v0=" + "0" * 64}, raw)),
        ("body re-encoded", lambda h, raw: (h, raw.replace(b"+", b"%20"))),
        ("301 s old", lambda h, raw: ({**h, "X-Slack-Request-Timestamp": str(NOW - 301)}, raw)),
    ],
)
def test_slack_agrees_with_slack_sdk(
    case: str, mutate: Callable[[dict[str, str], bytes], tuple[dict[str, str], bytes]]
) -> None:
    secret, raw = "8f742231b10e8888abcd99yyyzzz85a5", b"token=t&text=hello+world&command=%2Fdeploy"
    headers, _ = sign_slack(raw, secret, NOW)
    headers, raw = mutate(headers, raw)
    sdk = SignatureVerifier(secret, clock=FixedClock(NOW)).is_valid_request(raw, headers)
    ours = get_preset("slack").verify(inbound(raw, headers, content_type=FORM), [secret])
    assert (ours == "valid") == sdk
    assert (ours == "valid") == (case == "good")


def test_slack_form_body_re_encoded_parses_the_same_but_fails_the_signature() -> None:
    raw = b"text=hello+world&command=%2Fdeploy"
    headers, _ = sign_slack(raw, "secret", NOW)
    re_encoded = raw.replace(b"+", b"%20")
    assert parse_body(raw, FORM) == parse_body(re_encoded, FORM)
    assert (
        get_preset("slack").verify(inbound(re_encoded, headers, content_type=FORM), ["secret"]) == "invalid"
    )


@pytest.mark.parametrize("skew", [-310, -290, 0, 290, 310])  # the library reads the real clock
@pytest.mark.parametrize("tamper", [False, True])
def test_standard_agrees_with_the_reference_library(skew: int, tamper: bool) -> None:
    now = int(time.time())
    raw = b'{"type": "user.created", "data": {"id": 1}}'
    headers, _ = sign_standard(raw, STD_SECRET, now + skew)
    sent = raw.replace(b"1}", b"2}") if tamper else raw
    try:
        standardwebhooks.Webhook(STD_SECRET).verify(sent, headers)
        library = True
    except standardwebhooks.WebhookVerificationError:
        library = False
    ours = get_preset("standard").verify(inbound(sent, headers, now=now), [STD_SECRET])
    assert (ours == "valid") == library
    assert ours == ("invalid" if tamper else "expired" if abs(skew) > 300 else "valid")


class MultiDict(dict[str, list[str]]):
    """What Twilio's validator expects from a framework for repeated form keys."""

    def getall(self, name: str) -> list[str]:
        return self[name]


@pytest.mark.parametrize(
    "fields",
    [
        [("Body", "hi there"), ("From", "+15551234567"), ("MessageStatus", "received")],
        [("MediaUrl", "https://b"), ("MediaUrl", "https://a"), ("MediaUrl", "https://a"), ("To", "+1")],
        [("Body", "Grüße ✓"), ("Empty", "")],
    ],
)
@pytest.mark.parametrize("url", [URL + "?x=1", "https://hooks.example.com:8443/h?x=1&y=%20"])
def test_twilio_form_agrees_with_twilio_sdk(fields: list[tuple[str, str]], url: str) -> None:
    params = MultiDict()
    for name, value in fields:
        params.setdefault(name, []).append(value)
    validator = RequestValidator("tok")
    signature = validator.compute_signature(url, params)
    assert validator.validate(url, params, signature)
    req = inbound(urlencode(fields).encode(), {"X-Twilio-Signature": signature}, content_type=FORM, url=url)
    assert get_preset("twilio").verify(req, ["tok"]) == "valid"
    tampered = inbound(urlencode([*fields, ("Extra", "1")]).encode(), req.headers, content_type=FORM, url=url)
    assert get_preset("twilio").verify(tampered, ["tok"]) == "invalid"


def test_twilio_signature_over_default_port_url_is_accepted_both_ways() -> None:
    signature = RequestValidator("tok").compute_signature("https://hooks.example.com:443/h", {"A": "1"})
    req = inbound(
        b"A=1", {"X-Twilio-Signature": signature}, content_type=FORM, url="https://hooks.example.com/h"
    )
    assert get_preset("twilio").verify(req, ["tok"]) == "valid"
    assert RequestValidator("tok").validate("https://hooks.example.com/h", {"A": "1"}, signature)


def test_twilio_json_body_is_checked_through_body_sha256() -> None:
    raw = b'{"type": "com.twilio.messaging.message.delivered"}'
    req = signed("twilio", raw)
    assert RequestValidator(SECRETS["twilio"]).validate(
        req.url, raw.decode(), req.headers["x-twilio-signature"]
    )
    assert verify("twilio", req) == "valid"
    assert get_preset("twilio").event(req) == "twilio.com.twilio.messaging.message.delivered"
    swapped = inbound(raw.replace(b"delivered", b"failed"), req.headers, url=req.url)
    assert verify("twilio", swapped) == "invalid"


def test_twilio_json_body_without_body_sha256_is_invalid_even_if_the_url_is_signed() -> None:
    signature = RequestValidator("tok").compute_signature(URL, {})
    assert (
        get_preset("twilio").verify(inbound(b"{}", {"X-Twilio-Signature": signature}), ["tok"]) == "invalid"
    )


def test_twilio_hmac_sha256_webhook_setting() -> None:
    url = URL + "?x=1"
    signature = RequestValidator("shared").compute_signature(url, {"A": "1"}, "HMAC_SHA256")
    settings_header = "key=webhooks_sharedkey_1,algorithm=HMAC_SHA256"
    headers = {"X-Twilio-Signature": signature, "X-Twilio-Webhooks-Signature-Settings": settings_header}
    req = inbound(b"A=1", headers, content_type=FORM, url=url)
    assert get_preset("twilio").verify(req, ["shared"]) == "valid"
    sha1_claimed = inbound(b"A=1", {"X-Twilio-Signature": signature}, content_type=FORM, url=url)
    assert get_preset("twilio").verify(sha1_claimed, ["shared"]) == "invalid"
    unknown = {**headers, "X-Twilio-Webhooks-Signature-Settings": "algorithm=HMAC_MD5"}
    assert (
        get_preset("twilio").verify(inbound(b"A=1", unknown, content_type=FORM, url=url), ["shared"])
        == "invalid"
    )


# -- every signed preset: the outcomes and traps shared by all -----------------------------------------------


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_correct_signature_is_valid(name: str) -> None:
    assert verify(name, signed(name)) == "valid"


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_wrong_secret_is_invalid(name: str) -> None:
    assert verify(name, signed(name, secret=OLD_SECRETS[name])) == "invalid"


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_no_signature_headers_is_missing(name: str) -> None:
    assert verify(name, inbound(body_at())) == "missing"


def _signature_headers_replaced(name: str, value: str) -> Inbound:
    """A correctly signed request for preset ``name`` whose signature headers all hold ``value`` instead."""
    req = signed(name)
    signature_headers = get_preset(name).signature_headers
    headers = {key: value if key in signature_headers else given for key, given in req.headers.items()}
    return inbound(req.raw, headers, url=req.url)


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_blank_signature_headers_count_as_missing(name: str) -> None:
    assert verify(name, _signature_headers_replaced(name, "  ")) == "missing"


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_garbage_signature_header_is_invalid_not_missing(name: str) -> None:
    assert verify(name, _signature_headers_replaced(name, "garbage=☃,,v1=")) == "invalid"


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_no_secret_means_not_required_whatever_the_headers(name: str) -> None:
    assert verify(name, inbound(body_at(), {"X-Hub-Signature-256": "sha256=00"}), []) == "not_required"
    assert verify(name, signed(name), [""]) == "not_required"


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_previous_secret_verifies_only_while_it_is_passed(name: str) -> None:
    req = signed(name, secret=OLD_SECRETS[name])
    assert verify(name, req, [SECRETS[name], OLD_SECRETS[name]]) == "valid"
    assert verify(name, req, [OLD_SECRETS[name], SECRETS[name]]) == "valid"
    assert verify(name, req, [SECRETS[name]]) == "invalid"


@pytest.mark.parametrize("name", BODY_SIGNED)
def test_re_serialised_json_fails(name: str) -> None:
    original = signed(name)
    compact = json.dumps(json.loads(original.raw), separators=(",", ":")).encode()
    assert compact != original.raw and json.loads(compact) == original.body
    assert verify(name, inbound(compact, original.headers, url=original.url)) == "invalid"


def test_gitlab_token_is_a_shared_password_and_does_not_cover_the_body() -> None:
    req = signed("gitlab")
    assert verify("gitlab", inbound(b'{"anything": 1}', req.headers)) == "valid"
    assert verify("gitlab", inbound(req.raw, {"X-Gitlab-Token": SECRETS["gitlab"] + "x"})) == "invalid"


@pytest.mark.parametrize("name", BODY_SIGNED)
def test_json_array_body_is_signed_like_any_other(name: str) -> None:
    raw = b'[{"id": 1}, {"id": 2}]'
    req = signed(name, raw)
    assert isinstance(req.body, list)
    expected = "expired" if name == "linear" else "valid"  # Linear's timestamp lives in an object body
    assert verify(name, req) == expected


@pytest.mark.parametrize("name", BODY_SIGNED)
def test_signature_is_over_the_raw_bytes_including_a_bom(name: str) -> None:
    raw = b"\xef\xbb\xbf" + body_at()
    req = signed(name, raw)
    assert verify(name, req) == "valid"
    without_bom = inbound(raw[3:], req.headers, url=req.url)
    assert verify(name, without_bom) == "invalid"


# -- timestamps ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TIMESTAMPED)
@pytest.mark.parametrize(
    ("skew", "expected"), [(-301, "expired"), (-300, "valid"), (300, "valid"), (301, "expired")]
)
def test_timestamp_tolerance_is_five_minutes_both_ways(name: str, skew: int, expected: str) -> None:
    assert verify(name, signed(name, ts=NOW + skew)) == expected


@pytest.mark.parametrize("name", TIMESTAMPED)
def test_forged_signature_with_stale_timestamp_is_invalid_not_expired(name: str) -> None:
    assert verify(name, signed(name, secret=OLD_SECRETS[name], ts=NOW - 3600)) == "invalid"


@pytest.mark.parametrize("name", TIMESTAMPED)
def test_genuine_but_stale_with_old_secret_in_grace_is_expired(name: str) -> None:
    req = signed(name, secret=OLD_SECRETS[name], ts=NOW - 3600)
    assert verify(name, req, [SECRETS[name], OLD_SECRETS[name]]) == "expired"


@pytest.mark.parametrize(
    ("offset_ms", "expected"),
    [(-60_001, "expired"), (-60_000, "valid"), (60_000, "valid"), (60_001, "expired")],
)
def test_linear_body_timestamp_within_sixty_seconds(offset_ms: int, expected: str) -> None:
    assert verify("linear", signed("linear", body_at(NOW * 1000 + offset_ms))) == expected


@pytest.mark.parametrize("ts_ms", [None, "1700000000000", True])
def test_linear_signed_body_without_a_usable_timestamp_is_expired(ts_ms: str | bool | None) -> None:
    raw = json.dumps({"action": "create", **({} if ts_ms is None else {"webhookTimestamp": ts_ms})}).encode()
    assert verify("linear", signed("linear", raw)) == "expired"


def test_linear_forged_body_with_fresh_timestamp_is_invalid() -> None:
    assert verify("linear", signed("linear", secret="wrong")) == "invalid"


# -- scheme-specific malformations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        lambda sig: f"sha1={sig}",
        lambda sig: sig,
        lambda sig: f"sha256={sig[:-2]}",
        lambda sig: f"sha256={sig}00",
        lambda sig: "sha256=",
    ],
)
def test_hub_signature_needs_the_sha256_scheme_and_the_full_digest(header: Callable[[str], str]) -> None:
    raw = body_at()
    req = inbound(raw, {"X-Hub-Signature-256": header(hex_mac("s3cret-current", raw))})
    assert verify("github", req) == "invalid"


def test_hub_signature_hex_case_does_not_matter() -> None:
    raw = body_at()
    req = inbound(raw, {"X-Hub-Signature-256": "sha256=" + hex_mac("s3cret-current", raw).upper()})
    assert verify("github", req) == "valid"


def test_slack_missing_timestamp_header_is_missing() -> None:
    req = signed("slack")
    headers = {k: v for k, v in req.headers.items() if k != "x-slack-request-timestamp"}
    assert verify("slack", inbound(req.raw, headers)) == "missing"


@pytest.mark.parametrize(
    "change",
    [
        {"x-slack-request-timestamp": "17e8"},
        {"x-slack-request-timestamp": "-1"},
        {"x-slack-request-timestamp": "１７００"},  # full-width digits are digits to str.isdigit, not to us
        {"x-slack-signature": "v1=" + "0" * 64},
    ],
)
def test_slack_malformed_headers_are_invalid(change: dict[str, str]) -> None:
    req = signed("slack")
    assert verify("slack", inbound(req.raw, {**req.headers, **change})) == "invalid"


def test_slack_correct_digest_under_another_version_is_invalid() -> None:
    req = signed("slack")
    relabelled = req.headers["x-slack-signature"].replace("v0=", "v1=", 1)
    assert verify("slack", inbound(req.raw, {**req.headers, "x-slack-signature": relabelled})) == "invalid"


def test_standard_missing_any_of_the_three_headers_is_missing() -> None:
    req = signed("standard")
    for dropped in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        headers = {k: v for k, v in req.headers.items() if k != dropped}
        assert verify("standard", inbound(req.raw, headers)) == "missing"


def test_standard_non_numeric_timestamp_is_invalid() -> None:
    req = signed("standard")
    assert (
        verify("standard", inbound(req.raw, {**req.headers, "webhook-timestamp": "1700000000.5"}))
        == "invalid"
    )


def test_standard_secret_that_is_not_base64_is_used_as_raw_bytes() -> None:
    raw = body_at()
    signature = base64.b64encode(
        hmac.new(b"abcde", f"m.{NOW}.".encode() + raw, hashlib.sha256).digest()
    ).decode()
    headers = {"webhook-id": "m", "webhook-timestamp": str(NOW), "webhook-signature": f"v1,{signature}"}
    assert get_preset("standard").verify(inbound(raw, headers), ["abcde"]) == "valid"


# -- Stripe's whole-whsec key vs Standard's decoded key ------------------------------------------------------


def test_stripe_keys_with_the_whole_whsec_string_not_its_decoding() -> None:
    raw = body_at()
    decoded_key = base64.b64decode(STD_SECRET.removeprefix("whsec_"))
    signed_standard_way = f"t={NOW},v1={hex_mac(decoded_key, f'{NOW}.'.encode() + raw)}"
    assert get_preset("stripe").verify(
        inbound(raw, {"Stripe-Signature": signed_standard_way}), [STD_SECRET]
    ) == ("invalid")
    signed_stripe_way = stripe.WebhookSignature.generate_signature_header(raw.decode(), STD_SECRET, NOW)
    assert get_preset("stripe").verify(
        inbound(raw, {"Stripe-Signature": signed_stripe_way}), [STD_SECRET]
    ) == ("valid")


def test_standard_keys_with_the_decoded_secret_not_the_whole_whsec_string() -> None:
    raw = body_at()
    whole_key = base64.b64encode(
        hmac.new(STD_SECRET.encode(), f"m.{NOW}.".encode() + raw, hashlib.sha256).digest()
    )
    headers = {
        "webhook-id": "m",
        "webhook-timestamp": str(NOW),
        "webhook-signature": f"v1,{whole_key.decode()}",
    }
    assert get_preset("standard").verify(inbound(raw, headers), [STD_SECRET]) == "invalid"


# -- event names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "headers", "body", "expected"),
    [
        ("github", {"X-GitHub-Event": "pull_request"}, {"action": "opened"}, "github.pull_request.opened"),
        ("github", {"X-GitHub-Event": "push"}, {"ref": "refs/heads/main"}, "github.push"),
        ("github", {"X-GitHub-Event": "push"}, [1, 2], "github.push"),
        ("github", {}, {"action": "opened"}, DEFAULT_EVENT),
        (
            "gitlab",
            {"X-Gitlab-Event": "Merge Request Hook"},
            {"object_kind": "merge_request"},
            "gitlab.merge_request_hook",
        ),
        ("gitlab", {}, {"object_kind": "push"}, DEFAULT_EVENT),
        ("stripe", {}, {"type": "invoice.payment_failed"}, "stripe.invoice.payment_failed"),
        ("stripe", {}, {"type": 7}, DEFAULT_EVENT),
        ("slack", {}, {"type": "event_callback", "event": {"type": "app_mention"}}, "slack.app_mention"),
        ("slack", {}, {"type": "url_verification", "challenge": "c"}, "slack.url_verification"),
        ("slack", {}, {"type": "block_actions", "actions": []}, "slack.block_actions"),
        ("slack", {}, {"command": "/deploy", "text": ""}, "slack.slash_command"),
        ("shopify", {"X-Shopify-Topic": "orders/create"}, {}, "shopify.orders.create"),
        ("standard", {}, {"type": "user.created"}, "user.created"),
        ("standard", {}, [{"type": "user.created"}], DEFAULT_EVENT),
        ("linear", {"Linear-Event": "Issue"}, {"action": "create", "type": "Issue"}, "linear.issue.create"),
        ("linear", {}, {"action": "update", "type": "Comment"}, "linear.comment.update"),
        ("twilio", {}, {"MessageStatus": "delivered", "SmsStatus": "delivered"}, "twilio.message.delivered"),
        ("twilio", {}, {"SmsStatus": "received", "Body": "hi"}, "twilio.message.received"),
        ("twilio", {}, {"CallStatus": "completed"}, "twilio.call.completed"),
        ("twilio", {}, {"EventType": "onMessageAdded"}, "twilio.onmessageadded"),
        ("twilio", {}, {"Body": "hi"}, DEFAULT_EVENT),
        ("generic", {"X-Event-Type": "Order Created"}, {"event": "order.paid"}, "order.paid"),
        ("generic", {"X-Event-Type": "Order  Created"}, {"id": 1}, "order_created"),
        ("generic", {"X-Event-Type": "order.created"}, [1], "order.created"),
        ("generic", {}, {"event": {"nested": True}}, DEFAULT_EVENT),
        ("generic", {"X-Event-Type": "   "}, {"event": ""}, DEFAULT_EVENT),
    ],
)
def test_event_names(name: str, headers: dict[str, str], body: Payload, expected: str) -> None:
    assert get_preset(name).event(inbound(b"{}", headers, body=body)) == expected


def test_event_name_normalisation_drops_control_characters_and_caps_length() -> None:
    req = inbound(b"{}", {"X-GitHub-Event": "Push\x00\x1b[31m"}, body={"action": "x" * 500})
    event = get_preset("github").event(req)
    assert event == "github.push[31m." + "x" * 100


def test_slack_interactivity_form_is_named_from_its_payload() -> None:
    raw = urlencode({"payload": json.dumps({"type": "view_submission", "view": {"id": "V1"}})}).encode()
    assert get_preset("slack").event(inbound(raw, content_type=FORM)) == "slack.view_submission"


# -- dedupe keys ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "headers", "body", "expected"),
    [
        (
            "generic",
            {"Idempotency-Key": "k1", "X-GitHub-Delivery": "d1"},
            {},
            ("k1", "header:idempotency-key"),
        ),
        ("generic", {"X-GitHub-Delivery": "d1"}, {}, ("d1", "header:x-github-delivery")),
        (
            "generic",
            {"Idempotency-Key": " ", "X-GitHub-Delivery": "d1"},
            {},
            ("d1", "header:x-github-delivery"),
        ),
        ("generic", {}, {"id": "evt_1"}, (None, None)),
        (
            "github",
            {"X-GitHub-Delivery": "72d3162e-cc78-11e3"},
            {},
            ("72d3162e-cc78-11e3", "header:x-github-delivery"),
        ),
        ("github", {"Idempotency-Key": "k1"}, {}, (None, None)),
        (
            "gitlab",
            {"X-Gitlab-Event-UUID": "u1", "Idempotency-Key": "k1"},
            {},
            ("u1", "header:x-gitlab-event-uuid"),
        ),
        ("gitlab", {"Idempotency-Key": "k1"}, {}, ("k1", "header:idempotency-key")),
        ("stripe", {}, {"id": "evt_1NG8Du2eZvKYlo2CUI79vXWy"}, ("evt_1NG8Du2eZvKYlo2CUI79vXWy", "body:id")),
        ("stripe", {}, {"id": 42}, ("42", "body:id")),
        ("stripe", {}, {"id": True}, (None, None)),
        ("stripe", {}, [{"id": "evt_1"}], (None, None)),
        ("slack", {}, {"event_id": "Ev08MFMKH6"}, ("Ev08MFMKH6", "body:event_id")),
        ("slack", {}, {"type": "block_actions"}, (None, None)),
        ("shopify", {"X-Shopify-Webhook-Id": "b54557e4"}, {}, ("b54557e4", "header:x-shopify-webhook-id")),
        ("standard", {"webhook-id": "msg_1", "svix-id": "msg_2"}, {}, ("msg_1", "header:webhook-id")),
        ("standard", {"svix-id": "msg_2"}, {}, ("msg_2", "header:svix-id")),
        ("linear", {"Linear-Delivery": "234d1a4e"}, {}, ("234d1a4e", "header:linear-delivery")),
        (
            "twilio",
            {"I-Twilio-Idempotency-Token": "tok-1"},
            {},
            ("tok-1", "header:i-twilio-idempotency-token"),
        ),
    ],
)
def test_dedupe_keys_follow_the_table(
    name: str, headers: dict[str, str], body: Payload, expected: tuple[str | None, str | None]
) -> None:
    assert get_preset(name).dedupe_key(inbound(b"{}", headers, body=body)) == expected


def test_overlong_dedupe_key_is_hashed_to_fit_an_index() -> None:
    long_key = "k" * 5000
    key, source = get_preset("generic").dedupe_key(inbound(b"{}", {"Idempotency-Key": long_key}, body={}))
    assert key == "sha256:" + hashlib.sha256(long_key.encode()).hexdigest()
    assert source == "header:idempotency-key"
    exact = "k" * 200
    assert get_preset("generic").dedupe_key(inbound(b"{}", {"Idempotency-Key": exact}, body={}))[0] == exact


# -- Slack url_verification ----------------------------------------------------------------------------------


def test_slack_url_verification_challenge() -> None:
    body = {
        "token": "t",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }
    req = signed("slack", json.dumps(body).encode())
    assert verify("slack", req) == "valid"
    assert slack_challenge(req) == body["challenge"]


@pytest.mark.parametrize(
    "body",
    [
        {"type": "event_callback", "challenge": "c"},
        {"type": "url_verification"},
        {"type": "url_verification", "challenge": 5},
        {"type": "url_verification", "challenge": ""},
        [{"type": "url_verification", "challenge": "c"}],
    ],
)
def test_not_a_slack_challenge(body: Payload) -> None:
    assert slack_challenge(inbound(b"{}", body=body)) is None


# -- stored headers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_selected_headers_never_contain_a_signature_value(name: str) -> None:
    req = signed(name)
    headers = {
        **req.headers,
        "authorization": "Bearer hgk_secret",
        "cookie": "session=1",
        "user-agent": "GitHub-Hookshot/1",
    }
    selected = selected_headers(get_preset(name), headers)
    for header in get_preset(name).signature_headers & set(headers):
        assert selected[header] is True
    signature_values = {req.headers[h] for h in get_preset(name).signature_headers if h in req.headers}
    assert signature_values and not signature_values & set(selected.values())
    assert SECRETS[name] not in {str(value) for value in selected.values()}
    assert "authorization" not in selected and "cookie" not in selected
    assert selected["content-type"] == JSON and selected["user-agent"] == "GitHub-Hookshot/1"


def test_selected_headers_keep_provider_event_and_delivery_headers() -> None:
    headers = {
        "content-type": JSON,
        "x-github-event": "push",
        "x-github-delivery": "d1",
        "x-hub-signature-256": "sha256=abc",
        "x-hub-signature": "sha1=abc",
        "x-forwarded-for": "10.0.0.1",
    }
    assert selected_headers(get_preset("github"), headers) == {
        "content-type": JSON,
        "x-github-event": "push",
        "x-github-delivery": "d1",
        "x-hub-signature-256": True,
        "x-hub-signature": True,
    }


def test_selected_headers_truncate_long_values() -> None:
    selected = selected_headers(get_preset("generic"), {"user-agent": "u" * 5000})
    assert selected == {"user-agent": "u" * 1024}


@pytest.mark.parametrize("preset", PRESETS.values(), ids=list(PRESETS))
def test_signature_headers_are_never_also_stored_headers(preset: Preset) -> None:
    assert not preset.signature_headers & preset.stored_headers
    everything = {name: "value" for name in preset.signature_headers | preset.stored_headers}
    for name in preset.signature_headers:
        assert selected_headers(preset, everything)[name] is True


# -- properties ----------------------------------------------------------------------------------------------

HEADER_NAMES = sorted(
    {name for preset in PRESETS.values() for name in preset.signature_headers | preset.stored_headers}
    | {
        "content-type",
        "x-slack-request-timestamp",
        "webhook-id",
        "webhook-timestamp",
        "svix-id",
        "idempotency-key",
        "x-github-delivery",
        "x-shopify-webhook-id",
        "linear-delivery",
    }
)
header_values = (
    st.text(max_size=80)
    | st.sampled_from(["", " ", FORM, JSON, "v0=", "sha256=", "t=1,v1=", "v1,", "algorithm=HMAC_SHA256"])
    | st.builds(lambda a, b: f"t={a},v1={b}", st.integers(-(10**20), 10**20), st.text(max_size=70))
    | st.builds(lambda a, b: f"{a} v1,{b}", st.text(max_size=20), st.text(max_size=50))
    | st.integers(-(10**15), 10**15).map(str)
)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
bodies = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner, max_size=4),
    max_leaves=10,
).filter(lambda value: isinstance(value, dict | list))
fuzzy_bodies = bodies | st.fixed_dictionaries(
    {
        "webhookTimestamp": json_scalars,
        "type": json_scalars,
        "id": json_scalars,
        "event": bodies | json_scalars,
    }
)
urls = st.text(max_size=60) | st.sampled_from(
    [URL, "https://[::1", "http://h:99999/x", "https://h:abc/?bodySHA256=0"]
)


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from(sorted(PRESETS)),
    headers=st.dictionaries(st.sampled_from(HEADER_NAMES), header_values, max_size=8),
    raw=st.binary(max_size=200),
    body=fuzzy_bodies,
    url=urls,
    now=st.floats(allow_nan=True, allow_infinity=True) | st.integers(0, 2**40).map(float),
    secrets=st.lists(st.text(max_size=40), max_size=3),
)
def test_preset_functions_never_raise_and_verify_returns_one_of_five_statuses(
    name: str, headers: dict[str, str], raw: bytes, body: Payload, url: str, now: float, secrets: list[str]
) -> None:
    preset = get_preset(name)
    req = Inbound(raw=raw, headers=headers, body=body, url=url, now=now)
    assert preset.verify(req, secrets) in STATUSES
    assert isinstance(preset.event(req), str) and preset.event(req)
    key, source = preset.dedupe_key(req)
    assert (key is None) == (source is None)
    assert all(
        value is True or isinstance(value, str) for value in selected_headers(preset, headers).values()
    )
    assert slack_challenge(req) is None or isinstance(slack_challenge(req), str)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(BODY_SIGNED),
    note=st.text(max_size=40),
    secret=st.text(min_size=1, max_size=30).filter(lambda s: s.strip() == s and s.strip()),
    position=st.integers(min_value=0),
)
def test_any_signed_body_verifies_and_any_changed_byte_does_not(
    name: str, note: str, secret: str, position: int
) -> None:
    if name == "standard":
        secret = "whsec_" + base64.b64encode(secret.encode()).decode()
    raw = json.dumps({"note": note, "webhookTimestamp": NOW * 1000}).encode()
    req = signed(name, raw, secret)
    assert get_preset(name).verify(req, [secret]) == "valid"
    index = position % len(raw)
    changed = raw[:index] + bytes([raw[index] ^ 0x01]) + raw[index + 1 :]
    forged = Inbound(raw=changed, headers=req.headers, body=req.body, url=req.url, now=req.now)
    assert get_preset(name).verify(forged, [secret]) == "invalid"


@pytest.mark.parametrize("preset", PRESETS.values(), ids=lambda preset: preset.name)
def test_declared_event_headers_are_the_headers_the_event_name_is_read_from(preset: Preset) -> None:
    # /openapi.json documents `event_headers`: each must name the event alone, and no other header may.
    def named(headers: dict[str, str]) -> str:
        return preset.event(Inbound(raw=b"{}", headers=headers, body={}, url="https://h.test/hooks/x", now=0.0))

    for name in preset.event_headers:
        assert named({name: "Order Paid"}) != DEFAULT_EVENT, name
    others = {n: "Order Paid" for p in PRESETS.values() for n in p.event_headers | p.stored_headers}
    assert named({n: v for n, v in others.items() if n not in preset.event_headers}) == DEFAULT_EVENT


# -- hookgate send's signers (hookgate/signing.py) agree with the providers' SDKs ------------------------------


@pytest.mark.parametrize("name", sorted(SIGNERS))
def test_the_package_signer_signs_as_the_providers_sdk_does(name: str) -> None:
    from hookgate import signing

    raw = urlencode({"MessageStatus": "delivered", "MessageSid": "SM1"}).encode() if name == "twilio" else body_at()
    sent = signing.sign(name, signing.Outgoing(raw, URL, NOW, "msg_1"), SECRETS[name])
    if name == "twilio":  # a form body: the SDK signs the URL and the form's parameters
        expected = {"X-Twilio-Signature": RequestValidator(SECRETS[name]).compute_signature(
            URL, {"MessageStatus": "delivered", "MessageSid": "SM1"})}
    else:
        expected, _ = SIGNERS[name](raw, SECRETS[name], NOW)
    assert sent == expected
    req = inbound(raw, sent, content_type=FORM if name == "twilio" else JSON)
    assert verify(name, req) == "valid"
    assert get_preset(name).verify(req, ["another-secret"]) == "invalid"
