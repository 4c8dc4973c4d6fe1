"""Credentials before bodies, bounded bodies on every API, and JSON nesting bounded at parse time.

The runtime API authenticates before it reads a byte of the body; runtime and admin bodies are read with a
cap (413 past it, whatever Content-Length says); JSON nested deeper than the limit is a 400 at ingress, on
the runtime API and on the admin API, never a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlsplit

import psutil
import pytest

from hookgate.context import open_context
from tests import factories
from tests.conftest import asgi_client, make_settings
from tests.factories import bearer
from tests.gateway import ingress_kit as kit

LIMIT = 64  # hookgate.jsontext.MAX_DEPTH, written out so these tests also run (and fail) on the code before it
CAP = 1024 * 1024  # the default HOOKGATE_API_MAX_BODY_BYTES
MiB = 1024 * 1024
UNKNOWN_RUNTIME = {"Authorization": "Bearer hgr_" + "x" * 43}


def nested(depth: int, leaf: str = '"x"') -> bytes:
    """A JSON array nested ``depth`` levels deep around ``leaf`` (``[]`` is depth 1)."""
    return ("[" * depth + leaf + "]" * depth).encode()


async def pull_agent(ctx):
    """A pull agent with a runtime token."""
    return await factories.pull_agent(await factories.world(ctx))


@contextmanager
def peak_rss() -> Iterator[list[int]]:
    """Sample this process's RSS every few milliseconds; yields ``[baseline, peak]`` (peak filled at exit)."""
    proc = psutil.Process()
    found = [proc.memory_info().rss, 0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            found[1] = max(found[1], proc.memory_info().rss)
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join()


async def _send_huge(url: str, path: str, headers: dict[str, str], total: int) -> int:
    """POST ``total`` declared bytes over a socket; the status must arrive after the first 64 KiB is sent.

    The rest is then sent (or refused by a closed connection): nothing of it may pile up in the server.
    """
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(f"POST {path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
                 f"content-length: {total}\r\n{head}\r\n".encode())
    chunk = b"[" + b" " * (64 * 1024 - 1)
    writer.write(chunk)
    await writer.drain()
    try:
        status_line = await asyncio.wait_for(reader.readline(), 5)  # answered before the body was sent
        sent = len(chunk)
        try:
            while sent < total:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
        except ConnectionError:
            pass  # the server closed the connection instead of reading on: as good
        return int(status_line.split()[1])
    finally:
        writer.close()


@pytest.mark.parametrize("path,headers", [
    ("/v1/runtime/heartbeat", UNKNOWN_RUNTIME),
    ("/v1/runtime/claim", {}),
    # A task id nobody holds, fixed: parameters are the same in every collecting process (pytest -n).
    ("/v1/runtime/tasks/6f1d2c3e-0b6a-4c1e-9a57-3d2f8e4b7c10/report", {}),
    ("/v1/runtime/tasks/6f1d2c3e-0b6a-4c1e-9a57-3d2f8e4b7c10/renew", UNKNOWN_RUNTIME),
])
async def test_a_50_mib_unauthenticated_runtime_body_gets_401_unread_and_no_memory(live_url, path, headers):
    with peak_rss() as rss:
        status = await _send_huge(live_url, path, headers, 50 * MiB)
    assert status == 401
    assert rss[1] - rss[0] < 8 * MiB, f"RSS grew by {(rss[1] - rss[0]) / MiB:.1f} MiB"


async def test_a_runtime_body_declared_past_the_cap_gets_413_before_it_is_sent(ctx, live_url):
    agent = await pull_agent(ctx)
    status = await _send_huge(live_url, "/v1/runtime/heartbeat", bearer(agent.runtime_token), 50 * MiB)
    assert status == 413


async def _send_chunked(url: str, path: str, headers: dict[str, str], total: int) -> int:
    """POST up to ``total`` bytes with chunked encoding over a socket until the server answers; its status."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(f"POST {path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
                 f"transfer-encoding: chunked\r\n{head}\r\n".encode())
    piece = b" " * (64 * 1024)
    framed = b"%x\r\n%s\r\n" % (len(piece), piece)

    async def send() -> None:
        with contextlib.suppress(ConnectionError):
            for _ in range(total // len(piece)):
                writer.write(framed)
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        status_line = await asyncio.wait_for(reader.readline(), 20)
        return int(status_line.split()[1])
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        writer.close()


async def test_a_chunked_authenticated_runtime_body_past_the_cap_gets_413_and_is_not_buffered(ctx, live_url):
    agent = await pull_agent(ctx)
    with peak_rss() as rss:
        status = await _send_chunked(live_url, "/v1/runtime/heartbeat", bearer(agent.runtime_token), 50 * MiB)
    assert status == 413
    assert rss[1] - rss[0] < CAP + 8 * MiB, f"RSS grew by {(rss[1] - rss[0]) / MiB:.1f} MiB"


async def test_an_authenticated_runtime_body_past_the_cap_gets_413(ctx, client):
    agent = await pull_agent(ctx)
    body = b'{"instance":"' + b"x" * CAP + b'"}'
    answer = await client.post("/v1/runtime/heartbeat", content=body, headers=bearer(agent.runtime_token))
    assert answer.status_code == 413 and answer.json()["error"] == "payload_too_large"


async def test_a_lying_content_length_does_not_get_a_runtime_body_past_the_cap(ctx, client):
    agent = await pull_agent(ctx)
    app = client._transport.app  # type: ignore[attr-defined]
    piece = b" " * (256 * 1024)
    headers = [(b"authorization", f"Bearer {agent.runtime_token}".encode()), (b"content-length", b"2")]
    status, body, reads = await kit.asgi_post(app, "/v1/runtime/heartbeat", [b"{}", *[piece] * 40], headers)
    assert status == 413 and json.loads(body)["error"] == "payload_too_large"
    assert reads <= CAP // len(piece) + 2  # it stopped reading at the cap


async def test_an_unauthenticated_runtime_body_is_not_read_at_all(ctx, conn, client):
    app = client._transport.app  # type: ignore[attr-defined]
    task_id, _, _ = await factories.claimed_http_task(ctx, conn)
    for path, headers in [("/v1/runtime/heartbeat", []), ("/v1/runtime/claim", [(b"authorization", b"Bearer nope")]),
                          (f"/v1/runtime/tasks/{uuid.uuid4()}/report", []),
                          (f"/v1/runtime/tasks/{task_id}/renew", [(b"authorization", UNKNOWN_RUNTIME[
                              "Authorization"].encode())])]:
        status, _, reads = await kit.asgi_post(app, path, [b'{"lease_token":', b'"x"}'], headers)
        assert (status, reads) == (401, 0), path


async def test_an_admin_body_past_the_cap_gets_413(world, client):
    body = {"name": "x" * CAP, "runtime": {"kind": "pull"}}
    answer = await client.post("/v1/agents", json=body, headers=world.auth)
    assert answer.status_code == 413 and answer.json()["error"] == "payload_too_large"
    app = client._transport.app  # type: ignore[attr-defined]
    piece = b" " * (256 * 1024)
    headers = [(b"authorization", world.auth["Authorization"].encode()), (b"content-length", b"2"),
               (b"content-type", b"application/json")]
    status, raw, reads = await kit.asgi_post(app, "/v1/agents", [b"{}", *[piece] * 40], headers)
    assert status == 413 and json.loads(raw)["error"] == "payload_too_large"
    assert reads <= CAP // len(piece) + 2


# --- nesting ------------------------------------------------------------------------------------------


@pytest.fixture
async def hook(db_url):
    async with kit.app_client(db_url) as (ctx, client):
        yield await kit.hook(ctx), client


@pytest.mark.parametrize("raw", [
    nested(490, '"\\u0000"'), nested(490, '"a\\u0000b"'), nested(LIMIT + 1), nested(5000),
    b'{"a":' * (LIMIT + 1) + b"1" + b"}" * (LIMIT + 1),
])
async def test_deep_json_at_ingress_is_400_invalid_body(hook, raw):
    trigger, client = hook
    body, headers = kit.github(raw)
    answer = await client.post(trigger.path, content=body, headers=headers)
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_body", answer.text


@pytest.mark.parametrize("raw", [
    b"payload=" + quote(nested(490, '"\\u0000"')).encode(),
    b"payload=" + quote(nested(LIMIT + 1, '"x"')).encode(),
    b"payload=" + b"%5B" * 490 + b"%22%00%22" + b"%5D" * 490,  # a raw NUL in deep JSON: 400, not 500
])
async def test_deep_json_in_a_form_payload_at_ingress_is_400_invalid_body(hook, raw):
    trigger, client = hook
    body, headers = kit.github(raw)
    answer = await client.post(trigger.path, content=body,
                               headers=headers | {"content-type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_body", answer.text


async def test_json_at_the_depth_limit_is_accepted_at_ingress(hook):
    trigger, client = hook
    for raw in (nested(LIMIT), b'{"a":' * LIMIT + b'"[[[[{{{"' + b"}" * LIMIT):
        body, headers = kit.github(raw)
        answer = await client.post(trigger.path, content=body, headers=headers)
        assert answer.status_code == 200 and answer.json()["status"] == "accepted", answer.text


async def test_deep_json_on_the_runtime_api_is_400_invalid_body(ctx, client):
    agent = await pull_agent(ctx)
    deep = b'{"instance":"a","x":' + nested(LIMIT) + b"}"  # the object is one more level
    answer = await client.post("/v1/runtime/heartbeat", content=deep, headers=bearer(agent.runtime_token))
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_body", answer.text
    fine = b'{"instance":"a","x":' + nested(LIMIT - 1) + b"}"
    answer = await client.post("/v1/runtime/heartbeat", content=fine, headers=bearer(agent.runtime_token))
    assert answer.status_code == 200, answer.text


async def test_deep_json_on_the_admin_api_is_400_invalid_json(world, client):
    deep = b'{"name":"a","runtime":{"kind":"pull"},"x":' + nested(LIMIT - 1, '"\\u0000"') + b"}"
    as_json = world.auth | {"content-type": "application/json"}
    answer = await client.post("/v1/agents", content=deep, headers=as_json)
    assert answer.status_code == 422, answer.text  # at the limit: parsed, then refused for the unknown field
    deeper = b'{"name":"b","runtime":{"kind":"pull"},"x":' + nested(LIMIT, '"\\u0000"') + b"}"
    answer = await client.post("/v1/agents", content=deeper, headers=as_json)
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_json", answer.text
    for depth in (490, 5000):
        raw = b'{"name":"c","runtime":{"kind":"pull"},"x":' + nested(depth) + b"}"
        answer = await client.post("/v1/agents", content=raw, headers=world.auth)
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_json", answer.text


def test_the_documented_limit_is_the_code_limit():
    from hookgate.jsontext import MAX_DEPTH

    assert MAX_DEPTH == LIMIT


async def test_a_form_payload_with_a_percent_encoded_nul_escape_is_400_not_503(hook):
    trigger, client = hook
    raw = b"payload=" + quote('{"text":"a\\u0000b"}').encode()  # the backslash arrives as %5C
    body, headers = kit.github(raw)
    answer = await client.post(trigger.path, content=body,
                               headers=headers | {"content-type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_body", answer.text


@pytest.mark.parametrize("raw", [b'{"instance": "\xed\xb3\xbf"}', b'{"instance": "a\\u0000"}',
                                 b'{"instance": "\\udcff"}', b'{"instance": "\xff"}'])
async def test_runtime_text_no_database_can_hold_is_400_not_500(ctx, client, raw):
    agent = await pull_agent(ctx)
    for path in ("/v1/runtime/heartbeat", "/v1/runtime/claim"):
        answer = await client.post(path, content=raw, headers=bearer(agent.runtime_token))
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_body", (path, answer.text)


@pytest.mark.parametrize("result", [b"NaN", b"-Infinity", b'{"x":Infinity}', b'[1,NaN]'])
async def test_nan_or_infinity_in_a_runtime_report_is_400_not_500(world, conn, client, result):
    agent = await factories.pull_agent(world)
    ap = await factories.autopilot(world, agent.row["id"], mode="create_issue", instructions="do it")
    await factories.dispatched_run(conn, ap["id"])
    claimed = (await client.post("/v1/runtime/claim", headers=bearer(agent.runtime_token), json={})).json()
    raw = b'{"lease_token":"%s","status":"succeeded","result":%s}' % (claimed["lease_token"].encode(), result)
    answer = await client.post(f"/v1/runtime/tasks/{claimed['task']['id']}/report", content=raw,
                               headers=bearer(agent.runtime_token))
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_body", answer.text
    assert await conn.fetchval("SELECT status FROM agent_task WHERE id = $1", claimed["task"]["id"]) == "running"


async def test_the_api_body_cap_is_the_setting_and_defaults_to_1_mib(db_url, monkeypatch):
    monkeypatch.setenv("HOOKGATE_API_MAX_BODY_BYTES", "4096")
    assert make_settings(db_url).api_max_body_bytes == 4096  # read from the environment
    monkeypatch.delenv("HOOKGATE_API_MAX_BODY_BYTES")
    assert make_settings(db_url).api_max_body_bytes == CAP
    async with open_context(make_settings(db_url, api_max_body_bytes=4096), migrate=False) as ctx, \
            asgi_client(ctx) as client:
        w = await factories.world(ctx)
        agent = await factories.pull_agent(w)
        for size, status in ((4096, 200), (4097, 413)):
            padded = b'{"instance":"a"' + b" " * (size - 16) + b"}"  # whitespace: any size, the same body
            answer = await client.post("/v1/runtime/heartbeat", content=padded, headers=bearer(agent.runtime_token))
            assert (len(padded), answer.status_code) == (size, status), answer.text
            admin = b'{"name":"a","runtime":{"kind":"pull"}' + b" " * (size - 38) + b"}"
            answer = await client.post("/v1/agents", content=admin, headers=w.auth)
            assert (len(admin), answer.status_code) == (size, 201 if status == 200 else 413), answer.text
