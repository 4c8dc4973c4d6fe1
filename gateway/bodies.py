"""Request bodies at the HTTP edge: read with a cap while streaming, JSON parsed with a nesting limit.

:func:`read_capped` is the one bounded reader (ingress, runtime and admin APIs): it stops at the cap,
whatever Content-Length claims (a declared size past the cap is refused before a byte is read), so a
client can make the process buffer at most ``cap`` bytes. Parsing what was read is
:func:`hookgate.jsontext.loads` (nesting bounded before parsing; shared with the push worker).
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from gateway.errors import ApiError


async def read_capped(receive: Receive, declared: str, cap: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``cap`` (whatever Content-Length said).

    Raises :class:`starlette.requests.ClientDisconnect` if the client leaves before the body is complete.
    """
    if declared.isdigit() and int(declared) > cap:
        return None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_body(request: Request, cap: int) -> bytes:
    """The request's body through :func:`read_capped`; 413 ``payload_too_large`` past ``cap``."""
    raw = await read_capped(request.receive, request.headers.get("content-length", ""), cap)
    if raw is None:
        raise ApiError(413, "payload_too_large", f"the body is larger than {cap} bytes")
    return raw
