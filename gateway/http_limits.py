"""Server-side limits uvicorn lacks: a deadline to receive a request, a cap on its head, a cap on connections.

uvicorn arms no timer while a request's headers or body are arriving (its keep-alive timer is cancelled by
any byte), so a client sending headers byte by byte (slowloris) or a body that never ends would hold a
connection forever; its httptools parser accumulates a head without a bound, and neither parser bounds a
head that arrives whole. ``guarded(base, …)`` wraps uvicorn's protocol class (h11 or httptools):

- a request must be fully received within ``read_timeout_s`` of the connection's start or of the previous
  response, else **408** ``{"error":"request_timeout"}`` and the connection is closed. A request that was
  fully received is never cut, however long the application takes (a runtime claim long-polls);
- a request head (request line and header lines) larger than ``max_head_bytes`` gets **431**
  ``{"error":"headers_too_large"}`` and a close, before the application sees it: checked on the parsed head
  when it completes (whatever chunks it came in, first or pipelined or kept-alive request), and on the bytes
  of a head still arriving (so an endless head is cut after at most one read past the cap);
- at most ``gate.limit`` connections are open at once: past it a new connection is closed as soon as it is
  accepted, without reading or writing (the cheapest refusal; the open ones are not touched).

The protocol also sends each response in one write (:mod:`gateway.http_coalesce`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.http_coalesce import CoalescingTransport

MAX_HEAD_BYTES = 64 * 1024
TIMEOUT = b'{"error":"request_timeout","message":"the request was not received in time"}'
TOO_LARGE = b'{"error":"headers_too_large","message":"the request head is too large"}'
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
LINGER_S = 2.0
LINGER_BYTES = 256 * 1024


class ConnectionGate:
    """The open connections of one server, admitted while fewer than ``limit`` are open."""

    def __init__(self, limit: int) -> None:
        self.limit, self.open = limit, 0

    def enter(self) -> bool:
        """Count a new connection if there is room; False means refuse it."""
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def leave(self) -> None:
        """An admitted connection is gone."""
        self.open -= 1


class HeadTooLarge(Exception):
    """Raised inside a parser callback to stop parsing a head over the cap (answered 431)."""


def head_size(method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]) -> int:
    """Bytes of a parsed request head written out: ``METHOD target HTTP/1.1``, ``name: value`` lines, CRLFs."""
    return len(method) + len(target) + 12 + sum(len(name) + len(value) + 4 for name, value in headers) + 2


def _answer(status: int, body: bytes) -> bytes:
    head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
            % (status, _REASONS[status], len(body)))
    return head + body


class _Refusal:
    """A refusal that the client gets to read: the answer, then our side shut, then the close.

    Closing a socket with unread bytes in it makes the kernel reset the connection, and the client then
    often loses the answer it was sent. So after the answer the connection lingers: what the client still
    sends is read and dropped until it closes, for at most ``LINGER_S`` and ``LINGER_BYTES``.
    """

    transport: Any
    cycle: Any
    loop: asyncio.AbstractEventLoop
    lingering = False
    _dropped = 0

    def refuse(self, status: int, body: bytes) -> None:
        """Answer ``status`` unless a response is half sent on the connection (then only shut), and close."""
        transport, cycle = self.transport, self.cycle
        if self.lingering or transport.is_closing():
            return
        self.lingering = True
        if cycle is None or cycle.response_complete or not cycle.response_started:
            transport.write(_answer(status, body))
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        transport.resume_reading()
        self.loop.call_later(LINGER_S, transport.close)

    def drop(self, data: bytes) -> None:
        """Bytes that arrived after the refusal: dropped, up to ``LINGER_BYTES``, then the close."""
        self._dropped += len(data)
        if self._dropped > LINGER_BYTES:
            self.transport.close()


class _HttpToolsHeads(_Refusal, HttpToolsProtocol):
    """httptools with the head cap: bytes of a head still arriving, and each parsed head, are checked."""

    max_head_bytes = MAX_HEAD_BYTES
    _reading_head = True  # from a message's end (or the connection's start) to its headers' end
    _head_bytes = 0  # bytes received while reading a head (a read that ends a message starts the count at 0)
    _refusing = False  # a head was refused while earlier pipelined requests are still being answered

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            return
        if self._reading_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._reading_head and self._head_bytes > self.max_head_bytes:
            self._refuse_head()  # httptools would keep buffering it

    def on_headers_complete(self) -> None:
        self._reading_head, self._head_bytes = False, 0
        if head_size(self.parser.get_method(), self.url, self.headers) > self.max_head_bytes:
            self._refuse_head()
            raise HeadTooLarge  # stops the parser before uvicorn starts the application
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_head = True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refusing:
            self._refuse_head()

    def _refuse_head(self) -> None:
        if (self.cycle is not None and not self.cycle.response_complete) or self.pipeline:
            self._refusing = True  # earlier requests are answered first, in order; then the 431
            self.flow.pause_reading()
            return
        self.refuse(431, TOO_LARGE)

    def send_400_response(self, msg: str) -> None:
        if not (self._refusing or self.lingering or self.transport.is_closing()):  # else it was refused with 431
            super().send_400_response(msg)

    def mid_head(self) -> bool:
        """True while bytes of a new request head have arrived but not the whole head."""
        return self._reading_head and self._head_bytes > 0


class _HeadCappedConnection(h11.Connection):
    """h11's connection with the head cap: a whole head over it is a protocol error, as a partial one is."""

    head_too_large = False

    def __init__(self, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head_bytes)
        self.max_head_bytes = max_head_bytes

    def next_event(self) -> Any:
        """h11's next event; a request whose head is over the cap raises ``RemoteProtocolError`` (hint 431)."""
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            self.head_too_large = exc.error_status_hint == 431  # h11's own "receive buffer too long"
            raise
        if isinstance(event, h11.Request):
            if head_size(event.method, event.target, event.headers.raw_items()) > self.max_head_bytes:
                self.head_too_large = True
                raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
        return event


class _H11Heads(_Refusal, H11Protocol):
    """h11 with the head cap (h11 bounds a partial head itself; a whole one is checked when parsed)."""

    max_head_bytes = MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _HeadCappedConnection(self.max_head_bytes)

    def send_400_response(self, msg: str) -> None:
        conn = self.conn
        if isinstance(conn, _HeadCappedConnection) and conn.head_too_large:
            self.refuse(431, TOO_LARGE)
        else:
            super().send_400_response(msg)

    def mid_head(self) -> bool:
        """True while bytes of a new request head have arrived but not the whole head."""
        return bool(self.conn.trailing_data[0])


_HEADS: dict[type[asyncio.Protocol], type[asyncio.Protocol]] = {
    HttpToolsProtocol: _HttpToolsHeads, H11Protocol: _H11Heads,
}


def guarded(base: type[asyncio.Protocol], read_timeout_s: float, gate: ConnectionGate,
            max_head_bytes: int = MAX_HEAD_BYTES) -> type[asyncio.Protocol]:
    """A subclass of uvicorn's HTTP protocol ``base`` (h11 or httptools) with the limits above."""
    heads = _HEADS.get(base)
    if heads is None:
        raise ValueError(f"no head limit for {base.__name__}; use uvicorn's h11 or httptools protocol")

    class Guarded(heads):  # type: ignore[valid-type,misc]
        _deadline: asyncio.TimerHandle | None = None
        _admitted = False

        def connection_made(self, transport: Any) -> None:
            if not gate.enter():
                transport.close()  # over the cap: refused before a byte is read
                return
            self._admitted = True
            super().connection_made(CoalescingTransport(transport, self.loop))  # one send per response
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if not self._admitted:
                return
            gate.leave()
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.lingering:
                self.drop(data)
            else:
                super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(read_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            cycle = self.cycle
            if cycle is not None and not cycle.more_body and not cycle.response_complete:
                self._arm()  # fully received; the application is still answering
                return
            if cycle is not None and cycle.response_complete and not self.mid_head():
                self.transport.close()  # idle between requests (uvicorn's keep-alive normally got it first)
                return
            self.refuse(408, TIMEOUT)

    Guarded.max_head_bytes = max_head_bytes
    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded
