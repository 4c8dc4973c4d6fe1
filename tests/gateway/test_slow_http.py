"""Slow and malformed HTTP against a real ``hookgate gateway`` process is cut off by server limits.

Headers sent byte by byte (slowloris), an oversized head, and bodies that never end: each gets an answer
(408/431) and a closed connection within the read timeout, and none holds a database connection meanwhile.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.gateway import ingress_kit as kit

READ_TIMEOUT_S = 1.5


@pytest.fixture
async def gateway(ctx, spawn):
    hook = await kit.hook(ctx)
    proc = spawn.start("gateway", gateway=True, extra_env={"HOOKGATE_HTTP_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
                                                           "HOOKGATE_POOL_MAX_SIZE": "4"})
    proc.wait_ready()
    return proc, hook


async def _open(proc) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proc.port)


async def _answer_and_close(reader: asyncio.StreamReader, within: float) -> bytes:
    """Everything the server sends until it closes the connection (fails if it stays open too long)."""
    return await asyncio.wait_for(reader.read(), within)


async def test_headers_sent_byte_by_byte_get_408_and_a_close(gateway):
    proc, hook = gateway
    reader, writer = await _open(proc)
    start = time.monotonic()
    head = f"POST {hook.path} HTTP/1.1\r\nhost: x\r\nx-slow: ".encode() + b"a" * 200
    async def drip() -> None:
        for byte in head:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)
    dripping = asyncio.create_task(drip())
    answer = await _answer_and_close(reader, READ_TIMEOUT_S + 3)
    dripping.cancel()
    assert answer.startswith(b"HTTP/1.1 408") and b'"error":"request_timeout"' in answer
    assert time.monotonic() - start < READ_TIMEOUT_S + 2
    writer.close()


async def test_an_oversized_head_gets_431_and_a_close(gateway):
    proc, _ = gateway
    reader, writer = await _open(proc)
    writer.write(b"POST /hooks/x HTTP/1.1\r\nhost: x\r\nx-big: " + b"b" * 200_000)
    cut, deadline = False, time.monotonic() + 10
    while not cut and time.monotonic() < deadline:  # keep sending: the server must stop reading and close
        try:
            writer.write(b"b" * 65536)
            await writer.drain()
            await asyncio.sleep(0.02)
        except (ConnectionError, OSError):
            cut = True
    assert cut, "the server kept reading an endless head"
    try:
        answer = await _answer_and_close(reader, 5)
    except ConnectionError:  # closed with our unread bytes pending: the kernel resets (or our send fails), also a cut
        answer = b""
    assert answer == b"" or answer.split(b" ")[1] in (b"431", b"400")
    writer.close()
    assert httpx.get(proc.url + "/healthz").status_code == 200


async def test_bodies_that_never_end_are_cut_and_hold_no_database_connection(gateway, conn):
    proc, hook = gateway
    raw, headers = kit.github({"action": "opened"})
    streams = []
    for _ in range(12):  # three times the gateway's pool
        reader, writer = await _open(proc)
        head = f"POST {hook.path} HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode() + raw[:5])
        streams.append((reader, writer))
    await asyncio.sleep(0.3)
    busy = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                               "AND pid <> pg_backend_pid() AND state <> 'idle'")
    assert busy == 0  # the bodies are read with no connection held
    async with httpx.AsyncClient(base_url=proc.url) as http:  # and the pool still serves everyone else
        ok = await http.post(hook.path, content=raw, headers=headers, timeout=5)
    assert ok.json()["status"] == "accepted"
    answers = await asyncio.gather(*(_answer_and_close(r, READ_TIMEOUT_S + 3) for r, _ in streams))
    assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers[0]
    for _, writer in streams:
        writer.close()
    assert await conn.fetchval("SELECT count(*) FROM webhook_delivery") == 1


async def test_a_slow_but_complete_request_is_answered_normally(gateway):
    proc, hook = gateway
    raw, headers = kit.github({"action": "opened"})
    reader, writer = await _open(proc)
    head = f"POST {hook.path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(raw)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    writer.write(head.encode())
    await asyncio.sleep(READ_TIMEOUT_S / 3)
    writer.write(raw)
    line = await asyncio.wait_for(reader.readline(), 5)
    assert line.startswith(b"HTTP/1.1 200")
    writer.close()
