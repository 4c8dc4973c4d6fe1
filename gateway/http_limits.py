"""Server-side limits uvicorn lacks: a deadline to receive a whole request, and a cap on its head's size.

uvicorn arms no timer while a request's headers or body are arriving (its keep-alive timer is cancelled by
any byte), so a client sending headers byte by byte (slowloris) or a body that never ends would hold a
connection forever; and its httptools parser accumulates headers without a bound. ``guarded(base)`` wraps
uvicorn's protocol class: a request must be fully received within ``read_timeout_s`` of the connection's
start or of the previous response (else **408** ``{"error":"request_timeout"}`` and the connection is
closed), and a request head larger than ``max_head_bytes`` gets **431** and a close. A request that was fully
received is never cut, however long the application takes (a runtime claim long-polls). The protocol also
sends each response in one write (:mod:`gateway.http_coalesce`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.http_coalesce import CoalescingTransport

TIMEOUT = b'{"error":"request_timeout","message":"the request was not received in time"}'
TOO_LARGE = b'{"error":"headers_too_large","message":"the request head is too large"}'
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def _answer(status: int, body: bytes) -> bytes:
    head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
            % (status, _REASONS[status], len(body)))
    return head + body


def guarded(base: type[asyncio.Protocol], read_timeout_s: float, max_head_bytes: int) -> type[asyncio.Protocol]:
    """A subclass of uvicorn's HTTP protocol ``base`` (h11 or httptools) with the two limits above."""

    class Guarded(base):  # type: ignore[valid-type,misc]
        _deadline: asyncio.TimerHandle | None = None
        _head_bytes = 0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(CoalescingTransport(transport, self.loop))  # one send per response
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if self.cycle is before and (before is None or before.response_complete):
                self._head_bytes += len(data)  # still in a request head: nothing was parsed into a request
                if self._head_bytes > max_head_bytes:
                    self._refuse(431, TOO_LARGE)
            else:
                self._head_bytes = 0

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
            if cycle is not None and cycle.response_complete and not self._head_bytes:
                self.transport.close()  # idle between requests (uvicorn's keep-alive normally got it first)
                return
            self._refuse(408, TIMEOUT)

        def _refuse(self, status: int, body: bytes) -> None:
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is None or cycle.response_complete or not cycle.response_started:
                self.transport.write(_answer(status, body))
            self.transport.close()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded
