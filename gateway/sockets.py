"""The HTTP server's listening sockets, opened before anything is announced (kept light: no app is imported).

``hookgate gateway --workers N`` binds one set per gateway process in the supervising process, which serves
nothing itself, so this module imports only the standard library (:mod:`gateway.processes`).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

#: Connections the kernel queues before they are accepted: uvicorn's default, which the HTTP server keeps.
BACKLOG = 2048


class CannotListen(Exception):
    """The HTTP address cannot be bound (in use, not ours, unknown name): its message says which and why."""


def listen(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address ``host`` resolves to, as asyncio's ``create_server`` would open them."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    addresses = [(family, kind, proto, address) for family, kind, proto, _, address in dict.fromkeys(infos)]
    return _open(host, port, backlog, addresses)[0]


def listen_per_process(host: str, port: int, backlog: int, count: int) -> list[list[socket.socket]]:
    """``count`` sets of listening sockets on the same addresses and port, one set per gateway process.

    Each socket has SO_REUSEPORT, so the kernel spreads new connections over the sets by a hash of their
    addresses. The port is first bound once without it, as :func:`listen` does, and released at once: a
    port held by anyone (also by another process's SO_REUSEPORT sockets, which would otherwise let us
    share it silently) is :class:`CannotListen`, and port 0 becomes the port every set then binds.
    """
    probe = listen(host, port, backlog)
    port = port or int(probe[0].getsockname()[1])
    addresses = [(s.family, s.type, s.proto, (s.getsockname()[0], port, *s.getsockname()[2:])) for s in probe]
    for sock in probe:
        sock.close()
    return _open(host, port, backlog, addresses, sets=count, reuse_port=True)


def _open(host: str, port: int, backlog: int, addresses: Sequence[tuple[int, int, int, Any]], *, sets: int = 1,
          reuse_port: bool = False) -> list[list[socket.socket]]:
    """``sets`` sets of non-blocking listening sockets on ``addresses``; if one fails, all are closed again."""
    found: list[list[socket.socket]] = []
    try:
        for _ in range(sets):
            found.append([])
            for family, kind, proto, address in addresses:
                sock = socket.socket(family, kind, proto)
                found[-1].append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(backlog)
                sock.setblocking(False)
    except OSError as exc:
        for sock in (sock for group in found for sock in group):
            sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {(exc.strerror or str(exc)).lower()}") from None
    return found
