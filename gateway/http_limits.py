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
- at most ``gate.limit`` connections are open at once, and at most ``gate.per_ip`` from one client address
  (the TCP peer; an IPv6 address counts as its /64; a trusted proxy's connections count only against the
  cap, since they carry many clients). A new connection over either limit takes the place of the connection
  idle the longest that counts against that limit (idle: no request being received or answered, as a
  kept-alive connection between requests or one that has not sent a byte); only when none is idle is the
  new connection closed as soon as it is accepted, without reading or writing (the cheapest refusal). A
  request being received or answered is never cut to make room.

The protocol also sends each response in one write (:mod:`gateway.http_coalesce`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.http_coalesce import CoalescingTransport
from gateway.ratelimit import IPNetwork, parse_address, rate_key
from hookgate import metrics

MAX_HEAD_BYTES = 64 * 1024
TIMEOUT = b'{"error":"request_timeout","message":"the request was not received in time"}'
TOO_LARGE = b'{"error":"headers_too_large","message":"the request head is too large"}'
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
LINGER_S = 2.0
LINGER_BYTES = 256 * 1024


class Seat:
    """An admitted connection in a :class:`ConnectionGate`: its client key (None: a trusted proxy) and its close."""

    __slots__ = ("close", "gone", "idle", "key")

    def __init__(self, key: bytes | None, close: Callable[[], None]) -> None:
        self.key, self.close = key, close
        self.idle = self.gone = False


class ConnectionGate:
    """The open connections of one server: at most ``limit`` in all and ``per_ip`` per client address.

    The idle connections are kept in the order they became idle, in all and per client key, so the one idle
    the longest is found at once: that is the one a new connection over a limit replaces.
    """

    def __init__(self, limit: int, per_ip: int | None = None, trusted: tuple[IPNetwork, ...] = ()) -> None:
        self.limit, self.per_ip, self.trusted = limit, per_ip or limit, trusted
        self.open = 0
        self._held: dict[bytes, int] = {}  # open connections per client key (a key leaves at 0: bounded by open)
        self._idle: dict[Seat, None] = {}  # idle connections, the longest idle first
        self._idle_of: dict[bytes, dict[Seat, None]] = {}  # the same per client key

    @property
    def idle(self) -> int:
        """How many admitted connections are idle now."""
        return len(self._idle)

    def enter(self, peer: str | None, close: Callable[[], None]) -> Seat | None:
        """Admit a connection from ``peer`` (idle until :meth:`busy`), making room if needed; None: refuse it.

        ``close`` closes it, should it later be the idle connection that makes room for another.
        """
        key = self.key(peer)
        if key is not None and self._held.get(key, 0) >= self.per_ip and not self._shed(self._idle_of.get(key)):
            metrics.CONNECTIONS_CLOSED.labels("refused_ip").inc()
            return None
        if self.open >= self.limit and not self._shed(self._idle):
            metrics.CONNECTIONS_CLOSED.labels("refused_cap").inc()
            return None
        seat = Seat(key, close)
        self.open += 1
        if key is not None:
            self._held[key] = self._held.get(key, 0) + 1
        self.rest(seat)
        return seat

    def key(self, peer: str | None) -> bytes | None:
        """The client key of a connection from ``peer``, as the rate gates key it; None for a trusted proxy."""
        addr = parse_address(peer)
        if addr is not None and any(addr in net for net in self.trusted):
            return None
        return rate_key(addr)

    def rest(self, seat: Seat) -> None:
        """``seat``'s connection is idle from now on (it may be closed to make room)."""
        if seat.idle or seat.gone:
            return
        seat.idle = True
        self._idle[seat] = None
        if seat.key is not None:
            self._idle_of.setdefault(seat.key, {})[seat] = None

    def busy(self, seat: Seat) -> None:
        """``seat``'s connection is receiving or answering a request (it is not closed to make room)."""
        if not seat.idle:
            return
        seat.idle = False
        del self._idle[seat]
        if seat.key is not None:
            of_key = self._idle_of[seat.key]
            del of_key[seat]
            if not of_key:
                del self._idle_of[seat.key]

    def leave(self, seat: Seat) -> None:
        """An admitted connection is gone (a second call for the same seat does nothing)."""
        if seat.gone:
            return
        self.busy(seat)
        seat.gone = True
        self.open -= 1
        if seat.key is not None:
            self._held[seat.key] -= 1
            if not self._held[seat.key]:
                del self._held[seat.key]

    def _shed(self, idle: dict[Seat, None] | None) -> bool:
        """Close the connection idle the longest in ``idle``; False if there is none."""
        if not idle:
            return False
        seat = next(iter(idle))
        self.leave(seat)
        seat.close()
        metrics.CONNECTIONS_CLOSED.labels("idle").inc()
        return True


class HeadTooLarge(Exception):
    """Raised inside a parser callback to stop parsing a head over the cap (answered 431)."""


def head_size(method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]) -> int:
    """Bytes of a parsed request head written out: ``METHOD target HTTP/1.1``, ``name: value`` lines, CRLFs."""
    lines = headers if isinstance(headers, list) else list(headers)
    # Summed in C: with a generator over the lines the bench's head took 1.6 µs, now 1.0 (best of 7).
    return len(method) + len(target) + 12 + sum(map(len, chain.from_iterable(lines))) + 4 * len(lines) + 2


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
        _seat: Seat | None = None

        def connection_made(self, transport: Any) -> None:
            peer = transport.get_extra_info("peername")
            self._seat = gate.enter(peer[0] if isinstance(peer, tuple) else None, self._make_room)
            if self._seat is None:
                transport.close()  # over a limit with nothing idle to close: refused before a byte is read
                return
            super().connection_made(CoalescingTransport(transport, self.loop))  # one send per response
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._seat is None:
                return
            gate.leave(self._seat)
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._seat is not None:
                gate.busy(self._seat)
            if self.lingering:
                self.drop(data)
            else:
                super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()
            cycle = self.cycle  # a pipelined request already started makes a new, unanswered cycle
            if self._seat is not None and cycle is not None and cycle.response_complete and not self.mid_head() \
                    and not self.transport.is_closing():
                gate.rest(self._seat)

        def _make_room(self) -> None:
            """Closed, idle, to make room for a new connection: as uvicorn's keep-alive timer would close it."""
            self._disarm()
            self.transport.close()

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
