"""Request bodies at the HTTP edge: read with a cap while streaming, JSON parsed with a nesting limit.

:func:`read_capped` is the one bounded reader (ingress, runtime and admin APIs): it stops at the cap,
whatever Content-Length claims (a declared size past the cap is refused before a byte is read), so a
client can make the process buffer at most ``cap`` bytes. :func:`loads` refuses JSON nested deeper than
:data:`MAX_DEPTH` before parsing it, so neither the parser nor any code walking a parsed body
(encoders, validators, our own checks) recurses deeper than that.
"""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from gateway.errors import ApiError

MAX_DEPTH = 64
"""Deepest JSON nesting accepted (``[]`` is 1). Real webhook payloads stay under ~12 (GitHub ~8, Slack Block
Kit ~10); 64 leaves room for odd senders, keeps every recursive consumer far from Python's recursion limit,
and bounds the worst case of :func:`too_deep` (its cost grows with the limit)."""

_BOM = b"\xef\xbb\xbf"
_FOLD = bytes.maketrans(b"{}", b"[]")
_NOISE = bytes(c for c in range(256) if c not in b'[]{}"')
_SIGNED = bytes.maketrans(b"[]", b"\x01\xff")
_PEELS = 4  # innermost levels peeled at C speed before the exact count; real payloads are mostly gone by then


class TooDeep(ValueError):
    """JSON nested deeper than :data:`MAX_DEPTH`."""


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


def loads(text: str | bytes, **options: Any) -> Any:
    """``json.loads(text, **options)``, raising :class:`TooDeep` first if ``text`` nests too deep.

    Bytes must be UTF-8 (a leading BOM is dropped): ``json.loads`` alone would also take UTF-16 and let
    invalid UTF-8 through as lone surrogates, which no database text can hold (UnicodeDecodeError).
    """
    if isinstance(text, bytes):
        text = text.removeprefix(_BOM).decode("utf-8")
    if too_deep(text):
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
    return json.loads(text, **options)


def too_deep(text: str | bytes) -> bool:
    """Whether JSON ``text`` nests deeper than :data:`MAX_DEPTH`, by scanning its brackets (no recursion).

    Exact for valid JSON; for invalid JSON it errs either way and the parser refuses the text anyway.
    """
    if _openers(text) <= MAX_DEPTH:
        return False  # fewer openers than the limit: the common case costs two counts
    brackets = _structural_brackets(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    for peeled in range(_PEELS):
        inner = brackets.replace(b"[]", b"")  # one level off every innermost pair
        if len(inner) == len(brackets):
            return _deepest(brackets) + peeled > MAX_DEPTH
        brackets = inner
    return _deepest(brackets) + _PEELS > MAX_DEPTH


def _openers(text: str | bytes) -> int:
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def _structural_brackets(raw: bytes) -> bytes:
    """The brackets of ``raw`` outside strings, ``{}`` folded into ``[]``."""
    # Escaped backslashes, then escaped quotes, would fool the string boundaries below; most bodies have none.
    if b"\\\\" in raw:
        raw = raw.replace(b"\\\\", b"")
    if b'\\"' in raw:
        raw = raw.replace(b'\\"', b"")
    # Only quotes and brackets left; dropping "" pairs keeps every bracket on its side of the strings.
    skeleton = raw.translate(_FOLD, _NOISE).replace(b'""', b"")
    if b'"' in skeleton:  # strings holding brackets: keep what lies between them
        skeleton = b"".join(skeleton.split(b'"')[::2])
    return skeleton


def _deepest(brackets: bytes) -> int:
    """The greatest nesting of a bracket string (its highest running balance), summed in C."""
    if not brackets:
        return 0
    return max(accumulate(memoryview(brackets.translate(_SIGNED)).cast("b")))
