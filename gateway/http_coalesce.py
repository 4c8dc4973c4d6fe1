"""One send per response: the writes a connection makes in one event-loop step leave in one system call.

uvicorn writes a response's status line and headers, then its body, as two ``transport.write`` calls; on a
TCP socket with ``TCP_NODELAY`` (asyncio's default) each is its own ``send()`` and its own segment. On
loopback a ``send()`` also runs the receiver's side of the TCP stack and wakes it, so under load the
gateway spent about a sixth of its samples in ``send()``, two per webhook answered (docs/BENCHMARKS.md).
:class:`CoalescingTransport` wraps the connection's transport: writes made in the same step are joined and
sent at the end of the step (``loop.call_soon``), before anything else the loop runs for this connection,
so order is kept; ``close`` sends what is pending first. Every other call goes to the real transport.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: A write at least this large is not copied into a join; what is pending goes first, then it, directly.
DIRECT_WRITE_BYTES = 64 * 1024


class CoalescingTransport:
    """A transport whose writes within one event-loop step are sent together (see the module docstring)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` for the end of this step (a large write flushes the queue and goes at once)."""
        if len(data) >= DIRECT_WRITE_BYTES:
            self.flush()
            self._transport.write(data)
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        """Send what is pending now, in one write."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending = []
        if not self._transport.is_closing():
            self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        """Queue each chunk, as :meth:`write` does."""
        for chunk in chunks:
            self.write(chunk)

    def close(self) -> None:
        """Send what is pending, then close (the real transport still sends its own buffer first)."""
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        """Send what is pending, then shut the sending side (FIN)."""
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        """Drop what is pending and abort the connection."""
        self._pending = []
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        """Bytes not yet sent: the real transport's buffer and what this step queued."""
        return self._transport.get_write_buffer_size() + sum(len(chunk) for chunk in self._pending)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
