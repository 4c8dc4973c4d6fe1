"""A minimal, fast HTTP/1.1 agent for benchmarks: answers 200 to every POST and records receipt latency.

Each pushed body carries ``payload.payload.t0`` (the producer's ``time.time()`` at enqueue); the agent keeps
``now - t0`` per request. ``GET /stats`` returns ``{"count", "latencies_ms", "labels", "timed"}``; ``DELETE
/stats`` resets the count, the latencies and ``timed`` (not the per-label counters, which track pushes still held).
Run: ``python bench/agent.py PORT``.

Any other path answers at once, as a fast agent. A path ``/hold/<ms>/<label>`` makes a slow (or hanging) agent:
its pushes are answered ``ms`` milliseconds after receipt, and they are counted per label (``labels``:
``received``, ``untimed`` = pushes without a ``t0``, ``inflight`` = received and not yet answered). Each timed
push of such a path adds ``{"label", "ms", "untimed", "inflight"}`` to ``timed``, with every label's counters as
they were at its receipt: so a fairness bench can tell how much of a flood was still to come, or how many
pushes of a hanging agent were held, when a quiet push arrived.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, ClassVar

_OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}"


class Agent(asyncio.Protocol):
    """One keep-alive connection; parses Content-Length framed requests."""

    latencies: ClassVar[list[float]] = []
    count = 0
    #: Per ``/hold/`` label: received, untimed, inflight (cumulative; never reset).
    labels: ClassVar[dict[str, dict[str, int]]] = {}
    timed: ClassVar[list[dict[str, Any]]] = []

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
                Agent.latencies, Agent.count, Agent.timed = [], 0, []
            data = json.dumps({"count": Agent.count, "latencies_ms": Agent.latencies, "labels": Agent.labels,
                               "timed": Agent.timed}).encode()
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
        if path.startswith("/hold/"):
            self.hold(path, None if not t0 else (now - t0) * 1000)
            return
        self.transport.write(_OK)  # type: ignore[attr-defined]

    def hold(self, path: str, latency_ms: float | None) -> None:
        """Count a push of a ``/hold/<ms>/<label>`` path and answer it ``ms`` milliseconds later."""
        _, _, ms, label = path.split("/", 3)
        counts = Agent.labels.setdefault(label, {"received": 0, "untimed": 0, "inflight": 0})
        counts["received"] += 1
        counts["inflight"] += 1
        if latency_ms is None:
            counts["untimed"] += 1
        else:
            Agent.timed.append({"label": label, "ms": latency_ms,
                                "untimed": {k: c["untimed"] for k, c in Agent.labels.items()},
                                "inflight": {k: c["inflight"] for k, c in Agent.labels.items()}})

        def answer() -> None:
            counts["inflight"] -= 1
            if not self.transport.is_closing():
                self.transport.write(_OK)  # type: ignore[attr-defined]

        asyncio.get_running_loop().call_later(float(ms) / 1000, answer)


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Agent, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
