"""A minimal, fast HTTP/1.1 agent for benchmarks: answers 200 to every POST and records receipt latency.

Each pushed body carries ``payload.payload.t0`` (the producer's ``time.time()`` at enqueue); the agent keeps
``now - t0`` per request. ``GET /stats`` returns ``{"count", "latencies_ms"}``; ``DELETE /stats`` resets.
Run: ``python bench/agent.py PORT``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import ClassVar

_OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}"


class Agent(asyncio.Protocol):
    """One keep-alive connection; parses Content-Length framed requests."""

    latencies: ClassVar[list[float]] = []
    count = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """A new client connection."""
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        """Buffer bytes and handle every complete request."""
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4 : head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length :]
            self.handle(head.split(" ", 2), body)

    def handle(self, request_line: list[str], body: bytes) -> None:
        """Answer one request (stats, or a push: record its latency, say 200)."""
        method, path = request_line[0], request_line[1]
        if path == "/stats":
            if method == "DELETE":
                Agent.latencies, Agent.count = [], 0
            data = json.dumps({"count": Agent.count, "latencies_ms": Agent.latencies}).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "  # type: ignore[attr-defined]
                                 + str(len(data)).encode() + b"\r\n\r\n" + data)
            return
        now = time.time()
        Agent.count += 1
        try:
            t0 = json.loads(body)["payload"]["payload"].get("t0")
        except (ValueError, KeyError, AttributeError, TypeError):
            t0 = None
        if t0:
            Agent.latencies.append((now - t0) * 1000)
        self.transport.write(_OK)  # type: ignore[attr-defined]


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Agent, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
