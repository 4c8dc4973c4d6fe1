"""The presets that are configurations (meta, zoom, dropbox, paddle, intercom, discord, sendgrid).

Each is checked against its provider: Paddle's, Discord's and SendGrid's own SDKs verify what the test signs,
and the preset must agree with the SDK on the same requests; Meta, Zoom, Dropbox and Intercom publish no
verifier, so their signatures are computed here as their documentation describes. ``hookgate send`` signs
each HMAC preset's sample so that the gateway accepts it, through the API, end to end.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import typing

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from discord_interactions import verify_key
from paddle_billing.Notifications.PaddleSignature import PaddleSignature
from paddle_billing.Notifications.Secret import Secret
from sendgrid.helpers.eventwebhook import EventWebhook

from gateway import schemes
from gateway.admin.triggers import Provider
from gateway.providers import Inbound
from hookgate import signing
from hookgate.preset_data import PRESET_DATA
from hookgate.send import SAMPLES, signed_request
from tests.gateway.test_providers import NOW, URL, inbound

SECRET = "a provider's secret, 32 chars.."


def _check(name: str, req: Inbound, key: str = SECRET) -> str:
    return schemes.get_preset(name).verify(req, [key])


def test_every_preset_is_a_provider_the_api_takes_and_the_cli_can_send() -> None:
    assert set(typing.get_args(Provider)) == {*schemes.preset_names(), "custom"}
    assert set(SAMPLES) == set(schemes.preset_names())
    for name, data in PRESET_DATA.items():  # each is what a custom trigger would be given
        assert schemes.parse_scheme(data["signature"]).model_dump(exclude_unset=True) == data["signature"], name


# -- HMAC presets, from the providers' documentation -------------------------------------------------------

def _meta(raw: bytes, secret: str, ts: int) -> dict[str, str]:
    # "X-Hub-Signature-256: sha256=" + HMAC-SHA256 of the payload, keyed by the app secret.
    return {"X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()}


def _zoom(raw: bytes, secret: str, ts: int) -> dict[str, str]:
    # message = "v0:{x-zm-request-timestamp}:{body}"; x-zm-signature = "v0=" + hex HMAC-SHA256 (secret token).
    mac = hmac.new(secret.encode(), f"v0:{ts}:".encode() + raw, hashlib.sha256).hexdigest()
    return {"x-zm-request-timestamp": str(ts), "x-zm-signature": f"v0={mac}"}


def _dropbox(raw: bytes, secret: str, ts: int) -> dict[str, str]:
    # X-Dropbox-Signature: hex HMAC-SHA256 of the request body, keyed by the app secret.
    return {"X-Dropbox-Signature": hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()}


def _intercom(raw: bytes, secret: str, ts: int) -> dict[str, str]:
    # X-Hub-Signature: "sha1=" + hex HMAC-SHA1 of the body, keyed by the app's client secret.
    return {"X-Hub-Signature": "sha1=" + hmac.new(secret.encode(), raw, hashlib.sha1).hexdigest()}


def _paddle(raw: bytes, secret: str, ts: int) -> dict[str, str]:
    # Paddle-Signature: ts=<unix>;h1=<hex HMAC-SHA256 of "{ts}:{body}">, keyed by the destination's secret.
    mac = hmac.new(secret.encode(), f"{ts}:".encode() + raw, hashlib.sha256).hexdigest()
    return {"Paddle-Signature": f"ts={ts};h1={mac}"}


DOCUMENTED = {"meta": _meta, "zoom": _zoom, "dropbox": _dropbox, "intercom": _intercom, "paddle": _paddle}
TIMESTAMPED = {"zoom", "paddle"}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_hmac_preset_accepts_the_documented_signature_and_refuses_forged_tampered_and_stale(name: str) -> None:
    raw = json.dumps(SAMPLES[name](None, "5f0e", NOW).body).encode()
    sign = DOCUMENTED[name]
    assert _check(name, inbound(raw, sign(raw, SECRET, NOW))) == "valid"
    assert _check(name, inbound(raw, sign(raw, "another secret....", NOW))) == "invalid"
    assert _check(name, inbound(raw + b" ", sign(raw, SECRET, NOW))) == "invalid"
    assert _check(name, inbound(raw, {})) == "missing"
    stale = _check(name, inbound(raw, sign(raw, SECRET, NOW - 3612)))
    assert stale == ("expired" if name in TIMESTAMPED else "valid")


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_hookgate_send_signs_each_hmac_preset_as_its_provider_does(name: str) -> None:
    raw, headers = signed_request(name, URL, SECRET, now=NOW)
    wanted = DOCUMENTED[name](raw, SECRET, NOW)
    assert {k.lower(): v for k, v in headers.items() if k.lower() in {w.lower() for w in wanted}} == {
        k.lower(): v for k, v in wanted.items()}
    assert _check(name, inbound(raw, headers)) == "valid"


def test_paddle_preset_and_paddles_sdk_agree_also_during_a_rotation() -> None:
    raw = json.dumps(SAMPLES["paddle"](None, "1b2c", NOW).body).encode()
    old, new = "pdl_ntfset_old_secret_0001", "pdl_ntfset_new_secret_0002"
    signed_old, signed_new = _paddle(raw, old, NOW)["Paddle-Signature"], _paddle(raw, new, NOW)["Paddle-Signature"]
    both = signed_old + ";" + signed_new.partition(";")[2]  # ts=…;h1=<old>;h1=<new>, as Paddle sends in a rotation
    assert PaddleSignature().verify(both, raw.decode(), Secret(new))
    assert _check("paddle", inbound(raw, {"Paddle-Signature": both}), new) == "valid"
    with pytest.raises(ConnectionRefusedError):
        PaddleSignature().verify(signed_old, raw.decode(), [Secret(new)])
    assert _check("paddle", inbound(raw, {"Paddle-Signature": signed_old}), new) == "invalid"


def test_hmac_presets_name_events_and_dedupe_keys_from_their_bodies() -> None:
    def facts(name: str, event: str | None = None) -> tuple[str, tuple[str | None, str | None]]:
        raw = json.dumps(SAMPLES[name](event, "0c1d", NOW).body).encode()
        req = inbound(raw)
        return schemes.get_preset(name).event(req), schemes.get_preset(name).dedupe_key(req)

    assert facts("paddle", "Subscription.Created")[0] == "subscription.created"
    assert facts("paddle")[1] == ("evt_0c1d", "json:/event_id")
    assert facts("intercom")[0] == "conversation.user.created"
    assert facts("intercom")[1] == ("notif_0c1d", "json:/id")
    assert facts("meta")[0] == "whatsapp_business_account" and facts("meta")[1] == (None, None)
    assert facts("zoom", "meeting.ended")[0] == "meeting.ended"
    assert facts("dropbox") == ("webhook.received", (None, None))


# -- public-key presets, with the providers' SDKs --------------------------------------------------------

def test_discord_preset_and_discords_verifier_agree() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    public_hex = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    stored = schemes.public_key_text(public_hex, "ed25519")  # pasted as the developer portal shows it
    raw = json.dumps(SAMPLES["discord"]("blep", "77aa", NOW).body).encode()
    ts = str(NOW)
    signature = key.sign(ts.encode() + raw).hex()
    headers = {"X-Signature-Ed25519": signature, "X-Signature-Timestamp": ts}
    assert verify_key(raw, signature, ts, public_hex)
    assert _check("discord", inbound(raw, headers), stored) == "valid"
    assert not verify_key(raw + b" ", signature, ts, public_hex)
    assert _check("discord", inbound(raw + b" ", headers), stored) == "invalid"
    other = schemes.public_key_text(ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex(), "ed25519")
    assert _check("discord", inbound(raw, headers), other) == "invalid"
    preset = schemes.get_preset("discord")
    assert preset.event(inbound(raw)) == "blep" and preset.dedupe_key(inbound(raw))[1] == "json:/id"


def test_sendgrid_preset_takes_the_key_as_sendgrid_shows_it_and_agrees_with_its_sdk() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    shown = base64.b64encode(key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
    stored = schemes.public_key_text(shown, "ecdsa_p256_sha256")
    raw = json.dumps(SAMPLES["sendgrid"]("open", "9d8e", NOW).body).encode()
    ts = str(NOW)
    signature = base64.b64encode(key.sign(ts.encode() + raw, ec.ECDSA(hashes.SHA256()))).decode()
    headers = {"X-Twilio-Email-Event-Webhook-Signature": signature, "X-Twilio-Email-Event-Webhook-Timestamp": ts}
    assert EventWebhook(shown).verify_signature(raw.decode(), signature, ts)
    assert _check("sendgrid", inbound(raw, headers), stored) == "valid"
    assert not EventWebhook(shown).verify_signature(raw.decode(), signature, str(NOW + 1))
    headers_later = headers | {"X-Twilio-Email-Event-Webhook-Timestamp": str(NOW + 1)}
    assert _check("sendgrid", inbound(raw, headers_later), stored) == "invalid"
    preset = schemes.get_preset("sendgrid")
    assert preset.event(inbound(raw)) == "open" and preset.dedupe_key(inbound(raw)) == ("9d8e", "json:/0/sg_event_id")


def test_a_private_key_preset_sample_goes_unsigned() -> None:
    _, headers = signed_request("discord", URL, SECRET, now=NOW)
    assert not {"x-signature-ed25519", "x-signature-timestamp"} & {k.lower() for k in headers}
    assert signing.sign("sendgrid", signing.Outgoing(b"[]", URL, NOW, "m"), SECRET) == {}
