"""Signature schemes as data: each built-in preset written as a custom scheme decides as the preset does.

On the same provider vectors and SDK signatures the presets' own tests use; then the public-key,
shared-secret and basic-auth families, and validation on save.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from twilio.request_validator import RequestValidator

from gateway.providers import Inbound, get_preset
from gateway.schemes import SchemeError, as_preset, load_public_key, parse_scheme, public_key_text
from tests.gateway.test_providers import (
    FORM,
    NOW,
    OLD_SECRETS,
    SECRETS,
    SIGNERS,
    SLACK_VECTOR_BODY,
    STD_SECRET,
    TWILIO_PARAMS,
    URL,
    _signature_headers_replaced,
    body_at,
    inbound,
    signed,
    slack_vector,
    standard_vector,
    stripe_cases,
)

#: Each built-in preset's signature check, written as a custom scheme (docs/PROVIDERS.md shows these).
AS_DATA: dict[str, dict[str, Any]] = {
    "generic": {"header": "X-Hub-Signature-256", "prefix": "sha256="},
    "github": {"header": "X-Hub-Signature-256", "prefix": "sha256="},
    "gitlab": {"kind": "shared_secret", "header": "X-Gitlab-Token"},
    "stripe": {"header": "Stripe-Signature", "signature_part": "v1", "timestamp_part": "t",
               "signed": "{timestamp}.{body}"},
    "slack": {"header": "X-Slack-Signature", "prefix": "v0=", "signed": "v0:{timestamp}:{body}",
              "timestamp_header": "X-Slack-Request-Timestamp"},
    "shopify": {"header": "X-Shopify-Hmac-Sha256", "encoding": "base64"},
    "standard": {"header": "webhook-signature", "prefix": "v1,", "encoding": "base64", "secret_encoding": "base64",
                 "signed": "{header:webhook-id}.{timestamp}.{body}", "timestamp_header": "webhook-timestamp"},
    "linear": {"header": "Linear-Signature", "timestamp_json": "/webhookTimestamp", "timestamp_unit": "ms",
               "tolerance_s": 60},
    "twilio": {"header": "X-Twilio-Signature", "algorithm": "sha1", "encoding": "base64", "signed": "{twilio_form}"},
}


def as_data(name: str, req: Inbound, secrets: list[str]) -> str:
    return as_preset(parse_scheme(AS_DATA[name])).verify(req, secrets)


def cases() -> Iterator[tuple[str, str, Inbound, list[str], str | None]]:
    """(preset, case, request, secrets, the outcome the preset's own tests pin or None): the preset tests' inputs."""
    for name in sorted(SIGNERS):
        s, old = SECRETS[name], OLD_SECRETS[name]
        yield name, "signed", signed(name), [s], "valid"
        yield name, "wrong secret", signed(name, secret=old), [s], "invalid"
        yield name, "previous secret in grace", signed(name, secret=old), [s, old], "valid"
        yield name, "no headers", inbound(body_at()), [s], "missing"
        yield name, "blank signature", _signature_headers_replaced(name, "  "), [s], "missing"
        yield name, "garbage signature", _signature_headers_replaced(name, "garbage=☃,,v1="), [s], "invalid"
        yield name, "no secret", signed(name), [], "not_required"
        original = signed(name)
        compact = json.dumps(json.loads(original.raw), separators=(",", ":")).encode()
        yield name, "re-serialised", inbound(compact, original.headers, url=original.url), [s], None
        bom = signed(name, b"\xef\xbb\xbf" + body_at())
        yield name, "with a BOM", bom, [s], "valid"
        yield name, "BOM dropped", inbound(bom.raw[3:], bom.headers, url=bom.url), [s], None
        yield name, "array body", signed(name, b'[{"id": 1}, {"id": 2}]'), [s], None
        for skew in (-3600, -301, -300, 300, 301):
            yield name, f"signed {skew:+} s", signed(name, ts=NOW + skew), [s], None
            yield name, f"old secret {skew:+} s", signed(name, secret=old, ts=NOW + skew), [s, old], None
    for offset in (-60_001, -60_000, 60_000, 60_001):
        yield "linear", f"body timestamp {offset:+} ms", signed("linear", body_at(NOW * 1000 + offset)), \
            [SECRETS["linear"]], None
    for ts_ms in (None, "1700000000000", True):
        raw = json.dumps({"action": "create", **({} if ts_ms is None else {"webhookTimestamp": ts_ms})}).encode()
        yield "linear", f"body timestamp {ts_ms!r}", signed("linear", raw), [SECRETS["linear"]], "expired"
    secret, raw = "It's a Secret to Everybody", b"Hello, World!"
    github = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    docs = inbound(raw, {"X-Hub-Signature-256": github}, content_type="text/plain", body={})
    yield "github", "GitHub's documented vector", docs, [secret], "valid"
    yield "generic", "GitHub's documented vector", docs, [secret], "valid"
    yield "slack", "Slack's documented vector", slack_vector(), ["8f742231b10e8888abcd99yyyzzz85a5"], "valid"
    yield "slack", "Slack's vector years later", slack_vector(now=NOW), ["8f742231b10e8888abcd99yyyzzz85a5"], "expired"
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    twilio = inbound(urlencode(list(reversed(TWILIO_PARAMS.items()))).encode(),
                     {"X-Twilio-Signature": "0/KCTR6DLpKmkAf8muzZqo1nDgQ="}, content_type=FORM, url=url)
    yield "twilio", "Twilio's documented vector", twilio, ["12345"], "valid"
    yield "twilio", "Twilio's vector, wrong token", twilio, ["12346"], "invalid"
    for signature in ("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
                      "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
                      "v1a,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="):
        spec = standard_vector({"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
                                "webhook-signature": signature})
        yield "standard", f"the spec's vector {signature[:10]}", spec, [STD_SECRET], "valid"
        yield "standard", f"the spec's vector, bare key {signature[:10]}", spec, [STD_SECRET.removeprefix("whsec_")], \
            "valid"
    stripe_secret = "whsec_test_" + "a" * 32
    for case, payload, header in stripe_cases(stripe_secret, NOW):
        yield "stripe", f"Stripe SDK: {case}", inbound(payload, {"Stripe-Signature": header}), [stripe_secret], None


CASES = list(cases())


@pytest.mark.parametrize(("name", "case", "req", "secrets", "pinned"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_each_preset_as_a_custom_scheme_decides_as_the_preset_does(name: str, case: str, req: Inbound,
                                                                  secrets: list[str], pinned: str | None) -> None:
    ours = as_data(name, req, secrets)
    assert ours == get_preset(name).verify(req, secrets)
    assert pinned is None or ours == pinned


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(SIGNERS)),
       body=st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=4),
       skew=st.integers(-400, 400), tamper=st.booleans(), wrong=st.booleans())
def test_as_data_and_preset_agree_on_sdk_signed_requests(name: str, body: dict[str, str], skew: int, tamper: bool,
                                                        wrong: bool) -> None:
    raw = json.dumps({**body, "webhookTimestamp": (NOW + skew) * 1000}).encode()
    req = signed(name, raw, secret=OLD_SECRETS[name] if wrong else None, ts=NOW + skew)
    if tamper:
        req = inbound(raw + b" ", req.headers, url=req.url)
    secrets = [SECRETS[name]]
    assert as_data(name, req, secrets) == get_preset(name).verify(req, secrets)


def test_twilio_as_data_names_its_algorithm_where_the_preset_reads_a_setting() -> None:
    url = URL + "?x=1"
    signature = RequestValidator("shared").compute_signature(url, {"A": "1"}, "HMAC_SHA256")
    req = inbound(b"A=1", {"X-Twilio-Signature": signature}, content_type=FORM, url=url)
    sha256 = as_preset(parse_scheme({**AS_DATA["twilio"], "algorithm": "sha256"}))
    assert sha256.verify(req, ["shared"]) == "valid"
    assert as_data("twilio", req, ["shared"]) == "invalid"
    assert SLACK_VECTOR_BODY  # the form vectors above are the same bytes the preset tests use


# -- public keys --------------------------------------------------------------------------------------------


def _pem(key: Any) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def discord_like(raw: bytes, key: ed25519.Ed25519PrivateKey, ts: int = NOW) -> Inbound:
    signature = key.sign(str(ts).encode() + raw).hex()
    return inbound(raw, {"X-Signature-Ed25519": signature, "X-Signature-Timestamp": str(ts)})


DISCORD = {"kind": "public_key", "algorithm": "ed25519", "header": "X-Signature-Ed25519", "encoding": "hex",
           "signed": "{timestamp}{body}", "timestamp_header": "X-Signature-Timestamp"}
SENDGRID = {"kind": "public_key", "algorithm": "ecdsa_p256_sha256", "header": "X-Twilio-Email-Event-Webhook-Signature",
            "signed": "{timestamp}{body}", "timestamp_header": "X-Twilio-Email-Event-Webhook-Timestamp"}


def test_ed25519_signature_verifies_with_the_senders_key_in_every_spelling() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    raw_hex = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    der = base64.b64encode(key.public_key().public_bytes(serialization.Encoding.DER,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
    preset, req = as_preset(parse_scheme(DISCORD)), discord_like(b'{"type": 2}', key)
    for spelling in (raw_hex, der, _pem(key), public_key_text(raw_hex, "ed25519")):
        assert preset.verify(req, [spelling]) == "valid"
    other = ed25519.Ed25519PrivateKey.generate()
    assert preset.verify(req, [_pem(other)]) == "invalid"
    assert preset.verify(inbound(b'{"type": 3}', req.headers), [raw_hex]) == "invalid"
    assert preset.verify(discord_like(b'{"type": 2}', key, ts=NOW - 301), [raw_hex]) == "expired"
    assert preset.verify(inbound(b"{}"), [raw_hex]) == "missing"


@pytest.mark.parametrize("raw_rs", [False, True])
def test_ecdsa_p256_signature_over_timestamp_and_body_as_sendgrid_sends_it(raw_rs: bool) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    raw, ts = b'[{"event": "delivered"}]', str(NOW)
    der_sig = key.sign(ts.encode() + raw, ec.ECDSA(hashes.SHA256()))
    if raw_rs:
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
        r, s = decode_dss_signature(der_sig)
        der_sig = r.to_bytes(32) + s.to_bytes(32)
    headers = {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(der_sig).decode(),
               "X-Twilio-Email-Event-Webhook-Timestamp": ts}
    # SendGrid shows the key as base64 of its DER SubjectPublicKeyInfo, which is what is pasted.
    pasted = base64.b64encode(key.public_key().public_bytes(serialization.Encoding.DER,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
    preset = as_preset(parse_scheme(SENDGRID))
    assert preset.verify(inbound(raw, headers), [pasted]) == "valid"
    assert preset.verify(inbound(raw.replace(b"delivered", b"bounce"), headers), [pasted]) == "invalid"


def test_rsa_pkcs1_sha256_over_the_body() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raw = b'{"id": "evt_1"}'
    signature = base64.b64encode(key.sign(raw, padding.PKCS1v15(), hashes.SHA256())).decode()
    preset = as_preset(parse_scheme({"kind": "public_key", "algorithm": "rsa_pkcs1_sha256", "header": "X-Sig"}))
    assert preset.verify(inbound(raw, {"X-Sig": signature}), [_pem(key)]) == "valid"
    assert preset.verify(inbound(raw + b" ", {"X-Sig": signature}), [_pem(key)]) == "invalid"


@pytest.mark.parametrize(("text", "algorithm", "why"), [
    ("not a key", "ed25519", "not a public key"),
    ("00" * 31, "ed25519", "not a public key"),
    ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", "ed25519", "not a public key"),
])
def test_a_bad_public_key_is_refused_with_its_reason(text: str, algorithm: str, why: str) -> None:
    with pytest.raises(SchemeError, match=why):
        load_public_key(text, algorithm)


def test_a_key_of_another_family_or_curve_or_a_weak_rsa_key_is_refused() -> None:
    ed = _pem(ed25519.Ed25519PrivateKey.generate())
    with pytest.raises(SchemeError, match="not an ecdsa_p256_sha256"):
        load_public_key(ed, "ecdsa_p256_sha256")
    with pytest.raises(SchemeError, match="not P-256"):
        load_public_key(_pem(ec.generate_private_key(ec.SECP384R1())), "ecdsa_p256_sha256")
    with pytest.raises(SchemeError, match="too weak"):
        load_public_key(_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)), "rsa_pkcs1_sha256")


# -- shared secrets -----------------------------------------------------------------------------------------


def test_shared_secret_in_a_bearer_header() -> None:
    preset = as_preset(parse_scheme({"kind": "shared_secret", "header": "Authorization", "prefix": "Bearer "}))
    assert preset.verify(inbound(b"{}", {"Authorization": "Bearer tok-123456"}), ["tok-123456"]) == "valid"
    assert preset.verify(inbound(b"{}", {"Authorization": "Bearer tok-123457"}), ["tok-123456"]) == "invalid"
    assert preset.verify(inbound(b"{}", {"Authorization": "tok-123456"}), ["tok-123456"]) == "invalid"
    assert preset.verify(inbound(b"{}"), ["tok-123456"]) == "missing"
    assert "authorization" in preset.signature_headers  # stored as present: true, never its value


def test_shared_secret_in_a_query_parameter() -> None:
    preset = as_preset(parse_scheme({"kind": "shared_secret", "query": "api_key"}))
    assert preset.verify(inbound(b"{}", url=URL + "?api_key=k-123456"), ["k-123456"]) == "valid"
    assert preset.verify(inbound(b"{}", url=URL + "?api_key=k-12345"), ["k-123456"]) == "invalid"
    assert preset.verify(inbound(b"{}", url=URL), ["k-123456"]) == "missing"


def test_basic_auth_credentials() -> None:
    preset = as_preset(parse_scheme({"kind": "basic_auth"}))
    good = "Basic " + base64.b64encode(b"hook:pa ss:word").decode()
    assert preset.verify(inbound(b"{}", {"Authorization": good}), ["hook:pa ss:word"]) == "valid"
    assert preset.verify(inbound(b"{}", {"Authorization": good}), ["hook:pa ss:wore"]) == "invalid"
    assert preset.verify(inbound(b"{}", {"Authorization": "Basic %%%"}), ["hook:x"]) == "invalid"
    assert preset.verify(inbound(b"{}", {"Authorization": "Bearer " + good[6:]}), ["hook:pa ss:word"]) == "invalid"
    assert preset.verify(inbound(b"{}"), ["hook:x"]) == "missing"


# -- Paddle's structured header: ts=…;h1=… ---------------------------------------------------------------------


def test_a_structured_header_with_semicolons_and_several_signatures() -> None:
    import hashlib
    import hmac

    raw, secret = b'{"event_type": "transaction.completed"}', "pdl_ntfset_secret"
    good = hmac.new(secret.encode(), f"{NOW}:".encode() + raw, hashlib.sha256).hexdigest()
    scheme = {"header": "Paddle-Signature", "signature_part": "h1", "timestamp_part": "ts",
              "signed": "{timestamp}:{body}", "tolerance_s": 5}
    preset = as_preset(parse_scheme(scheme))
    for header in (f"ts={NOW};h1={good}", f"ts={NOW};h1={'0' * 64};h1={good}"):
        assert preset.verify(inbound(raw, {"Paddle-Signature": header}), [secret]) == "valid"
    assert preset.verify(inbound(raw, {"Paddle-Signature": f"ts={NOW};h1={good}"}, now=NOW + 6), [secret]) == "expired"
    assert preset.verify(inbound(raw, {"Paddle-Signature": f"ts={NOW};ts={NOW};h1={good}"}), [secret]) == "invalid"


# -- validation on save -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("scheme", "where"), [
    ({"header": "X-Sig", "signed": "{bodyy}"}, "unknown placeholder"),
    ({"header": "X-Sig", "signed": "{body}}"}, "brace"),
    ({"header": "X-Sig", "signed": "{timestamp}.{body}"}, "no timestamp_header"),
    ({"header": "X-Sig", "timestamp_part": "t"}, "timestamp_part needs signature_part"),
    ({"header": "X-Sig", "timestamp_header": "T", "timestamp_json": "/t"}, "one place"),
    ({"header": "X Sig"}, "header"),
    ({"header": "X-Sig", "algorithm": "md5"}, "algorithm"),
    ({"header": "X-Sig", "tolerance_s": 0}, "tolerance_s"),
    ({"header": "X-Sig", "surprise": 1}, "surprise"),
    ({"kind": "public_key", "header": "X-Sig"}, "algorithm"),
    ({"kind": "shared_secret"}, "exactly one of header and query"),
    ({"kind": "shared_secret", "header": "A", "query": "b"}, "exactly one of header and query"),
    ({"kind": "rot13"}, "kind"),
])
def test_a_bad_scheme_is_refused_naming_the_part(scheme: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError, match=where):
        parse_scheme(scheme)


@settings(max_examples=200, deadline=None)
@given(family=st.sampled_from([AS_DATA["stripe"], AS_DATA["slack"], AS_DATA["standard"], DISCORD]),
       headers=st.dictionaries(st.sampled_from(["Stripe-Signature", "X-Slack-Signature", "X-Slack-Request-Timestamp",
                                                "webhook-signature", "webhook-id", "webhook-timestamp",
                                                "X-Signature-Ed25519", "X-Signature-Timestamp"]),
                               st.text(max_size=80), max_size=4),
       raw=st.binary(max_size=64))
def test_no_scheme_accepts_a_request_it_did_not_see_signed(family: dict[str, Any], headers: dict[str, str],
                                                         raw: bytes) -> None:
    key = _pem(ed25519.Ed25519PrivateKey.generate()) if family is DISCORD else STD_SECRET
    req = Inbound(raw=raw, headers={k.lower(): v for k, v in headers.items()}, body={}, url=URL, now=time.time())
    assert as_preset(parse_scheme(family)).verify(req, [key]) in ("missing", "invalid")


def _sign(scheme: dict[str, Any], secret: str, raw: bytes, ts: int) -> dict[str, str]:
    """Headers a sender following `scheme` (an hmac one, as `generated_schemes` makes) would send."""
    import hashlib
    import hmac

    message = scheme["signed"].replace("{timestamp}", str(ts)).encode().replace(b"{body}", raw)
    mac = hmac.new(secret.encode(), message, getattr(hashlib, scheme["algorithm"])).digest()
    encoded = mac.hex() if scheme["encoding"] == "hex" else base64.b64encode(mac).decode()
    if scheme.get("signature_part"):
        return {scheme["header"]: f"t={ts},{scheme['signature_part']}={encoded}"}
    return {scheme["header"]: scheme["prefix"] + encoded, "X-Ts": str(ts)}


@st.composite
def generated_schemes(draw: st.DrawFn) -> dict[str, Any]:
    """Random hmac schemes: algorithm, encoding, prefix, a timestamp in its own header or a structured one."""
    structured = draw(st.booleans())
    scheme = {"header": "X-Sig", "algorithm": draw(st.sampled_from(["sha1", "sha256", "sha512"])),
              "encoding": draw(st.sampled_from(["hex", "base64"])),
              "prefix": "" if structured else draw(st.sampled_from(["", "sha256=", "v1,"])),
              "signed": draw(st.sampled_from(["{timestamp}.{body}", "{body}", "v0:{timestamp}:{body}"])),
              "tolerance_s": draw(st.integers(1, 600))}
    if structured:
        return scheme | {"signature_part": "v1", "timestamp_part": "t"}
    return scheme | {"timestamp_header": "X-Ts"}


@settings(max_examples=150, deadline=None)
@given(scheme=generated_schemes(), raw=st.binary(min_size=1, max_size=64), secret=st.text(min_size=8, max_size=20),
       flip=st.integers(0, 63), late=st.integers(1, 10_000))
def test_no_generated_scheme_accepts_a_forged_tampered_or_stale_request(scheme: dict[str, Any], raw: bytes,
                                                                       secret: str, flip: int, late: int) -> None:
    preset = as_preset(parse_scheme(scheme))
    now = NOW

    def check(body: bytes, headers: dict[str, str], at: float = now, key: str = secret) -> str:
        lowered = {k.lower(): v for k, v in headers.items()}
        return preset.verify(Inbound(raw=body, headers=lowered, body={}, url=URL, now=at), [key])

    headers = _sign(scheme, secret, raw, now)
    assert check(raw, headers) == "valid"
    i = flip % len(raw)
    tampered = raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1:]
    assert check(tampered, headers) == "invalid"
    assert check(raw, headers, key=secret + "x") == "invalid"
    assert check(raw, _sign(scheme, secret + "x", raw, now - late)) == "invalid"
    # Genuine but late: expired, also when the template does not sign the timestamp it is sent with.
    assert check(raw, _sign(scheme, secret, raw, now - scheme["tolerance_s"] - late)) == "expired"
