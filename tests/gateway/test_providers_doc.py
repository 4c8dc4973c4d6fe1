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

from hookgate.context import Context, open_context
from tests import factories
from tests.conftest import make_settings, serving

DOC = Path(__file__).resolve().parents[2] / "docs" / "PROVIDERS.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -> ([\w.]+) -->\n```sh\n(.*?)```", re.S)
EXAMPLES = EXAMPLE.findall(DOC.read_text())
SECRETS = {"standard": "whsec_" + base64.b64encode(b"a standard webhooks key, 32 bytes").decode(),
           "stripe": "whsec_stripe-endpoint-secret-0123456789"}


def test_every_preset_has_one_example() -> None:
    from gateway.providers import PRESETS

    assert sorted(preset for preset, _, _ in EXAMPLES) == sorted(PRESETS)


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
                                                             event: str, script: str) -> None:
    ctx, base = served
    secret = SECRETS.get(preset, "It's a Secret to Everybody")
    s = await factories.small(ctx, provider=preset, secret=secret)
    trigger, token = s.trigger, s.token
    env = {"PATH": "/usr/bin:/bin", "URL": f"{base}/hooks/{token}", "SECRET": secret}
    done = await asyncio.to_thread(subprocess.run, ["bash", "-euo", "pipefail", "-c", script], env=env,
                                   capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == "accepted", answer
    row = await ctx.pool.fetchrow("SELECT event, signature_status FROM webhook_delivery WHERE id = $1",
                                  answer["delivery_id"])
    assert (row["event"], row["signature_status"]) == (event, "valid")
    assert answer["trigger_id"] == str(trigger["id"])
