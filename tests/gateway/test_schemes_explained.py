"""A rejected request to a scheme given as data is explained in words: which header, how old, which key.

The words are stored as the delivery's reason (the API's `reason`, the dashboard's delivery page) and never
answered to the sender, since they name the secret's last four characters as the API's hint does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from gateway.schemes import parse_scheme, public_key_text
from tests.gateway.test_providers import NOW, inbound

RAW = b'{"event": "order.paid"}'
SECRET = "an in-house secret 0042"
STAMPED = {"header": "X-Sig", "signed": "{timestamp}.{body}", "timestamp_header": "X-Ts", "prefix": "v1="}


def _mac(secret: str, ts: int, raw: bytes = RAW) -> str:
    return "v1=" + hmac.new(secret.encode(), f"{ts}.".encode() + raw, hashlib.sha256).hexdigest()


def _explain(scheme: dict[str, object], headers: dict[str, str], secrets: list[str] | None = None,
             url: str | None = None) -> str:
    parsed = parse_scheme(scheme)
    req = inbound(RAW, headers) if url is None else inbound(RAW, headers, url=url)
    assert parsed.check(req, (secrets or [SECRET])[0]) != "valid"
    return parsed.explain(req, secrets or [SECRET])


@pytest.mark.parametrize(("headers", "words"), [
    ({}, "header X-Sig is missing"),
    ({"X-Sig": _mac(SECRET, NOW)}, "header X-Ts is missing"),
    ({"X-Sig": "v2=abc", "X-Ts": str(NOW)}, "header X-Sig holds no signature of the form v1=<hex>"),
    ({"X-Sig": _mac(SECRET, NOW), "X-Ts": "soon"}, "the timestamp in header X-Ts is missing, repeated or not a "
                                                  "whole number"),
    ({"X-Sig": _mac(SECRET, NOW - 3612), "X-Ts": str(NOW - 3612)}, "timestamp 3,612 s old, tolerance 300 s"),
    ({"X-Sig": _mac(SECRET, NOW + 900), "X-Ts": str(NOW + 900)}, "timestamp 900 s in the future, tolerance 300 s"),
    ({"X-Sig": _mac("a guess at it", NOW), "X-Ts": str(NOW)},
     "the HMAC-SHA256 of {timestamp}.{body} in header X-Sig does not match the one made with the secret "
     "ending …0042"),
])
def test_each_failing_part_of_an_hmac_scheme_is_named(headers: dict[str, str], words: str) -> None:
    assert _explain(STAMPED, headers) == words


def test_a_rotation_names_both_secrets_and_a_structured_header_its_part() -> None:
    forged = {"X-Sig": _mac("a guess at it", NOW), "X-Ts": str(NOW)}
    assert _explain(STAMPED, forged, [SECRET, "the old one 9999"]).endswith("ending …0042 or …9999")
    paddle = {"header": "Paddle-Signature", "signature_part": "h1", "timestamp_part": "ts",
              "signed": "{timestamp}:{body}"}
    assert _explain(paddle, {"Paddle-Signature": "h1=00"}) == (
        "the timestamp in part ts of header Paddle-Signature is missing, repeated or not a whole number")


def test_an_ed25519_signature_names_the_key_it_did_not_verify_with() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    stored = public_key_text(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode(),
                             "ed25519")
    scheme = {"kind": "public_key", "algorithm": "ed25519", "header": "X-Signature-Ed25519", "encoding": "hex",
              "timestamp_header": "X-Signature-Timestamp", "signed": "{timestamp}{body}"}
    forged = {"X-Signature-Ed25519": ed25519.Ed25519PrivateKey.generate().sign(f"{NOW}".encode() + RAW).hex(),
              "X-Signature-Timestamp": str(NOW)}
    assert _explain(scheme, forged, [stored]) == (
        "the Ed25519 signature of {timestamp}{body} in header X-Signature-Ed25519 does not verify with the key "
        f"ending …{stored[-4:]}")


def test_shared_secret_and_basic_auth_failures_are_named() -> None:
    bearer = {"kind": "shared_secret", "header": "Authorization", "prefix": "Bearer "}
    assert _explain(bearer, {}) == "header Authorization is missing"
    assert _explain(bearer, {"Authorization": "Bearer nope"}) == (
        "header Authorization does not hold after 'Bearer ' the secret ending …0042")
    query = {"kind": "shared_secret", "query": "api_key"}
    assert _explain(query, {}) == "query parameter api_key is missing"
    basic = {"kind": "basic_auth"}
    assert _explain(basic, {}) == "header Authorization is missing"
    wrong = "Basic " + base64.b64encode(b"user:nope").decode()
    assert _explain(basic, {"Authorization": wrong}, ["user:pass 0042"]) == (
        "the Basic credentials in header Authorization are not the user:password ending …0042")
