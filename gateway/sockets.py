"""The HTTP server's listening sockets, opened before anything is announced (kept light: no app is imported).

``hookgate gateway --workers N`` binds them in the supervising process, which serves nothing itself, so
this module imports only the standard library (:mod:`gateway.processes`).
"""

from __future__ import annotations

import socket

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
    opened: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            opened.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError as exc:
        for sock in opened:
            sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {(exc.strerror or str(exc)).lower()}") from None
    return opened
