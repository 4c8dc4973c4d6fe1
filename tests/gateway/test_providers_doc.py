"""Every example request in docs/PROVIDERS.md, run as written (bash, curl, openssl) against a real server.

Each example is a ```sh block after a ``<!-- example: <preset> -> <event> -->`` marker. It gets ``URL`` (the
trigger's public URL, which is the live server's own address, so Twilio's URL signature checks out) and
``SECRET`` (a secret in the preset's format) and must be accepted as a delivery with the documented event.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from gateway import schemes
from hookgate.context import Context, open_context
from hookgate.preset_data import PRESET_DATA
from tests import factories
from tests.conftest import make_settings, serving

DOC = Path(__file__).resolve().parents[2] / "docs" / "PROVIDERS.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -> ([\w.]+) -->\n```sh\n(.*?)```", re.S)
EXAMPLES = EXAMPLE.findall(DOC.read_text())
SECRETS = {"standard": "whsec_" + base64.b64encode(b"a standard webhooks key, 32 bytes").decode(),
           "stripe": "whsec_stripe-endpoint-secret-0123456789"}


def test_every_preset_has_one_example() -> None:
    assert sorted(preset for preset, _, _ in EXAMPLES) == schemes.preset_names()


def _sender_key(preset: str, directory: Path) -> tuple[str, dict[str, str]]:
    """For a public-key preset, what the trigger stores and ``KEY``: a PEM file of the sender's private key."""
    algorithm = PRESET_DATA[preset]["signature"]["algorithm"]
    key = ed25519.Ed25519PrivateKey.generate() if algorithm == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    path = directory / "sender.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return schemes.public_key_text(public.decode(), algorithm), {"KEY": str(path)}


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[tuple[Context, str]]:
    """A live server whose HOOKGATE_PUBLIC_URL is its own address."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    async with open_context(make_settings(db_url, public_url=base), migrate=False) as ctx:
        async with serving(ctx, port=port):
            yield ctx, base


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
@pytest.mark.parametrize(("preset", "event", "script"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
async def test_documented_example_is_accepted_with_its_event(served: tuple[Context, str], preset: str,
                                                             event: str, script: str, tmp_path: Path) -> None:
    ctx, base = served
    secret, extra = SECRETS.get(preset, "It's a Secret to Everybody"), {}
    if PRESET_DATA.get(preset, {}).get("signature", {}).get("kind") == "public_key":
        secret, extra = _sender_key(preset, tmp_path)
    s = await factories.small(ctx, provider=preset, secret=secret)
    trigger, token = s.trigger, s.token
    env = {"PATH": "/usr/bin:/bin", "URL": f"{base}/hooks/{token}", "SECRET": secret, **extra}
    done = await asyncio.to_thread(subprocess.run, ["bash", "-euo", "pipefail", "-c", script], env=env,
                                   capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == "accepted", answer
    row = await ctx.pool.fetchrow("SELECT event, signature_status FROM webhook_delivery WHERE id = $1",
                                  answer["delivery_id"])
    assert (row["event"], row["signature_status"]) == (event, "valid")
    assert answer["trigger_id"] == str(trigger["id"])


NAMES = re.compile(r"<!-- names: generic -->\n((?:\s*\|.*\|\n)+)")


def documented_names() -> list[tuple[str, str]]:
    """The rows of the page's event-name table: (what the sender sends, the event name Hookgate makes)."""
    found = NAMES.search(DOC.read_text())
    assert found, "docs/PROVIDERS.md has no event-name table"
    rows = [[cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
            for line in found.group(1).splitlines()[2:]]
    return [(sent, made) for sent, made in rows]


@pytest.mark.parametrize(("sent", "made"), documented_names())
async def test_documented_event_names_are_the_names_deliveries_get(db_url: str, sent: str, made: str) -> None:
    from tests.gateway.ingress_kit import app_client, hook

    async with app_client(db_url) as (ctx, http):
        h = await hook(ctx, provider="generic", secret=None)
        answer = await http.post(h.path, json={"event": sent}, headers={"Idempotency-Key": sent})
        assert answer.json()["status"] == "accepted", answer.text
        event = await ctx.pool.fetchval("SELECT event FROM webhook_delivery WHERE id = $1",
                                        answer.json()["delivery_id"])
    assert event == made


def test_documented_secret_length_is_the_one_enforced() -> None:
    from annotated_types import MaxLen, MinLen

    from gateway.admin.triggers import SigningSecret

    limits = {type(m): m for m in SigningSecret.__metadata__[0].metadata}
    low, high = limits[MinLen].min_length, limits[MaxLen].max_length
    assert f"**{low} to {high} characters**" in DOC.read_text()


@pytest.mark.parametrize(("content_type", "status"), [
    ("application/json", 200), ("application/vnd.sender+json", 200), (None, 200),
    ("application/x-www-form-urlencoded", 200), ("text/csv", 200), ("application/xml", 200),
    ("multipart/form-data", 415), ("application/octet-stream", 415),
])
async def test_documented_body_types_are_the_ones_accepted(db_url: str, content_type: str | None,
                                                          status: int) -> None:
    from tests.gateway.ingress_kit import app_client, hook

    page = DOC.read_text()
    said = {None: "no `Content-Type`", "application/vnd.sender+json": "`application/*+json`", "text/csv": "`text/*`"}
    assert (said.get(content_type, f"`{content_type}`") if status == 200 else "415 unsupported_media_type") in page
    body = b"event=x" if content_type and "form" in content_type else b'{"event": "x"}'
    headers = {"content-type": content_type} if content_type else {}
    async with app_client(db_url) as (ctx, http):
        h = await hook(ctx, provider="generic", secret=None)
        answer = await http.post(h.path, content=body, headers=headers)
    assert answer.status_code == status, answer.text


CUSTOM = re.compile(r"<!-- custom: (\w+) -> ([\w.]+) -->\n```json\n(.*?)```\n```sh\n(.*?)```", re.S)
CUSTOM_EXAMPLES = CUSTOM.findall(DOC.read_text())


def test_every_scheme_family_has_a_custom_example() -> None:
    assert sorted(kind for kind, _, _, _ in CUSTOM_EXAMPLES) == ["basic_auth", "hmac", "public_key", "shared_secret"]


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
@pytest.mark.parametrize(("kind", "event", "scheme", "script"), CUSTOM_EXAMPLES, ids=[e[0] for e in CUSTOM_EXAMPLES])
async def test_documented_custom_example_is_accepted_with_its_event(served: tuple[Context, str], tmp_path: Path,
                                                                    kind: str, event: str, scheme: str,
                                                                    script: str) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from gateway.schemes import parse_scheme, public_key_text

    ctx, base = served
    stored = parse_scheme(json.loads(scheme)).model_dump(mode="json")
    env = {"PATH": "/usr/bin:/bin", "SECRET": "hooks:It's a Secret to Everybody"}
    secret = env["SECRET"]
    if kind == "public_key":
        key = ed25519.Ed25519PrivateKey.generate()
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        (tmp_path / "sender.pem").write_bytes(pem)
        env["SENDER_KEY"] = str(tmp_path / "sender.pem")
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        secret = public_key_text(public, "ed25519")
    s = await factories.small(ctx, provider="custom", signature_scheme=stored, secret=secret)
    env["URL"] = f"{base}/hooks/{s.token}"
    done = await asyncio.to_thread(subprocess.run, ["bash", "-euo", "pipefail", "-c", script], env=env,
                                   capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == "accepted", answer
    row = await ctx.pool.fetchrow("SELECT event, signature_status FROM webhook_delivery WHERE id = $1",
                                  answer["delivery_id"])
    assert (row["event"], row["signature_status"]) == (event, "valid")


HANDSHAKE = re.compile(r"<!-- handshake: (\w+)(?: (\{.*?\}))? -> (.*?) -->\n```sh\n(.*?)```", re.S)
HANDSHAKE_EXAMPLES = HANDSHAKE.findall(DOC.read_text())
REPLY = re.compile(r"<!-- reply: (\{.*?\}) -> (.*?) -->\n```sh\n(.*?)```", re.S)
REPLY_EXAMPLES = REPLY.findall(DOC.read_text())


def test_every_handshake_kind_has_an_example() -> None:
    from hookgate.preset_data import PRESET_HANDSHAKES

    kinds = {json.loads(own)["kind"] if own else PRESET_HANDSHAKES[preset]["kind"]
             for preset, own, _, _ in HANDSHAKE_EXAMPLES}
    assert kinds == {"meta", "echo_query", "zoom", "discord_ping", "slack_url_verification"}
    assert len(REPLY_EXAMPLES) == 1


async def _run(script: str, env: dict[str, str]) -> str:
    done = await asyncio.to_thread(subprocess.run, ["bash", "-euo", "pipefail", "-c", script], env=env,
                                   capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
@pytest.mark.parametrize(("preset", "own", "expected", "script"), HANDSHAKE_EXAMPLES,
                         ids=[e[0] for e in HANDSHAKE_EXAMPLES])
async def test_documented_handshake_is_answered_and_stores_nothing(served: tuple[Context, str], tmp_path: Path,
                                                                   preset: str, own: str, expected: str,
                                                                   script: str) -> None:
    from autopilot import rules

    ctx, base = served
    secret, extra = "It's a Secret to Everybody", {"VERIFY_TOKEN": "meatyhamhock"}
    if PRESET_DATA.get(preset, {}).get("signature", {}).get("kind") == "public_key":
        secret, keys = _sender_key(preset, tmp_path)
        extra |= keys
    s = await factories.small(ctx, provider=preset, secret=secret, handshake=json.loads(own) if own else None)
    async with ctx.pool.acquire() as conn:
        await rules.set_verify_token(conn, ctx.keyring, s.trigger["id"], extra["VERIFY_TOKEN"])
    answer = await _run(script, {"PATH": "/usr/bin:/bin", "URL": f"{base}/hooks/{s.token}", "SECRET": secret,
                                 **extra})
    assert re.fullmatch(expected, answer), answer
    assert await ctx.pool.fetchval("SELECT count(*) FROM webhook_delivery") == 0


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
@pytest.mark.parametrize(("reply", "expected", "script"), REPLY_EXAMPLES)
async def test_documented_reply_answers_an_accepted_delivery(served: tuple[Context, str], reply: str, expected: str,
                                                             script: str) -> None:
    ctx, base = served
    s = await factories.small(ctx, provider="twilio", reply=json.loads(reply))
    answer = await _run(script, {"PATH": "/usr/bin:/bin", "URL": f"{base}/hooks/{s.token}"})
    assert re.fullmatch(expected, answer), answer
    assert await ctx.pool.fetchval("SELECT status FROM webhook_delivery") == "queued"

FILTER = re.compile(r"<!-- filter: (accepted|ignored) -->\n```json\n(.*?)```\n```sh\n(.*?)```", re.S)
FILTER_EXAMPLES = FILTER.findall(DOC.read_text())


def test_the_payload_filter_examples_cover_both_outcomes_and_every_body_kind() -> None:
    assert {outcome for outcome, _, _ in FILTER_EXAMPLES} == {"accepted", "ignored"}
    scripts = " ".join(script for _, _, script in FILTER_EXAMPLES)
    assert "--data-urlencode" in scripts and "text/plain" in scripts and "application/json" in scripts


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
@pytest.mark.parametrize(("outcome", "node", "script"), FILTER_EXAMPLES,
                         ids=[f"{n}-{e[0]}" for n, e in enumerate(FILTER_EXAMPLES)])
async def test_documented_payload_filter_example_gets_its_answer(served: tuple[Context, str], outcome: str, node: str,
                                                                 script: str) -> None:
    from gateway.admin.payload_filters import FilterTestIn

    ctx, base = served
    wanted = FilterTestIn.model_validate({"payload": {}, "filter": json.loads(node)}).filter  # validated as on save
    s = await factories.small(ctx, provider="generic", payload_filter=wanted)
    env = {"PATH": "/usr/bin:/bin", "URL": f"{base}/hooks/{s.token}"}
    done = await asyncio.to_thread(subprocess.run, ["bash", "-euo", "pipefail", "-c", script], env=env,
                                   capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == outcome, answer
    if outcome == "ignored":
        assert answer["reason"] == "payload_filter"
        reason = await ctx.pool.fetchval("SELECT reason FROM webhook_delivery WHERE id = $1", answer["delivery_id"])
        assert reason.startswith("the payload filter does not match: ")
