"""One send per response: writes of one event-loop step leave together, in order; close sends them first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.http_coalesce import DIRECT_WRITE_BYTES, CoalescingTransport

pytestmark = pytest.mark.asyncio


class _Held(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport


@pytest.fixture
async def pair() -> AsyncIterator[tuple[CoalescingTransport, list[bytes], asyncio.StreamReader]]:
    """A real loopback TCP connection: the server side wrapped, its real writes recorded; the client's reader."""
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[_Held] = loop.create_future()

    def protocol() -> _Held:
        held = _Held()
        loop.call_soon(lambda: accepted.done() or accepted.set_result(held))
        return held

    server = await loop.create_server(protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    real: asyncio.Transport = (await accepted).transport  # type: ignore[assignment]
    sent: list[bytes] = []
    write = real.write

    def recording_write(data: bytes) -> None:
        sent.append(bytes(data))
        write(data)

    real.write = recording_write  # type: ignore[method-assign]
    yield CoalescingTransport(real, loop), sent, reader
    writer.close()
    real.close()
    server.close()
    await server.wait_closed()


async def test_writes_of_one_step_are_sent_in_one_write_in_order(pair) -> None:
    transport, sent, reader = pair
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"{}")
    assert sent == []  # nothing sent inside the step
    await asyncio.sleep(0)
    assert sent == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    assert await reader.readexactly(len(sent[0])) == sent[0]
    transport.write(b"next")
    await asyncio.sleep(0)
    assert sent[1:] == [b"next"]  # a later step is its own write


async def test_close_sends_what_is_pending_first(pair) -> None:
    transport, sent, reader = pair
    transport.write(b"head")
    transport.write(b"body")
    transport.close()
    assert sent == [b"headbody"]
    assert await reader.read() == b"headbody"  # then EOF


async def test_a_large_write_goes_at_once_after_what_is_pending(pair) -> None:
    transport, sent, reader = pair
    big = b"x" * DIRECT_WRITE_BYTES
    transport.write(b"head")
    transport.write(big)
    assert sent == [b"head", big]
    assert await reader.readexactly(4 + len(big)) == b"head" + big


async def test_abort_drops_what_is_pending(pair) -> None:
    transport, sent, _ = pair
    transport.write(b"never")
    transport.abort()
    await asyncio.sleep(0)
    assert sent == []
    assert transport.is_closing()
