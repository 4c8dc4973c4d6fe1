"""JSON text from outside (request bodies, agents' replies): nesting bounded before parsing, and what jsonb refuses.

:func:`loads` refuses JSON nested deeper than :data:`MAX_DEPTH` before parsing it, so neither the parser nor
any code walking a parsed value (encoders, validators, our own checks) recurses deeper than that.
:func:`unstorable` tells why PostgreSQL's jsonb could not hold a parsed value (a NUL, a lone surrogate, an
infinite number), so it is refused where it arrives instead of failing the statement that stores it.
Shared by the gateway (every request body) and the push worker (agents' replies).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import accumulate
from json.encoder import encode_basestring
from typing import Any

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


def loads(text: str | bytes, **options: Any) -> Any:
    """``json.loads(text, **options)``, raising :class:`TooDeep` first if ``text`` nests too deep.

    Bytes must be UTF-8 (a leading BOM is dropped): ``json.loads`` alone would also take UTF-16 and let
    invalid UTF-8 through as lone surrogates, which no database text can hold (UnicodeDecodeError).
    """
    if isinstance(text, bytes):
        text = text.removeprefix(_BOM).decode("utf-8")
    return decode(text, json.JSONDecoder(**options) if options else _DEFAULT)


_DEFAULT = json.JSONDecoder()


def decode(text: str, decoder: json.JSONDecoder) -> Any:
    """:func:`loads` of ``text`` with a ``decoder`` built once (``json.loads`` with options builds one per call)."""
    if text.startswith("\ufeff"):  # as json.loads refuses it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    if too_deep(text):
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
    return decoder.decode(text)


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


def compact_encoder(*, allow_nan: bool) -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=...)`` as a function made once.

    ``JSONEncoder.encode`` builds a new C encoder on every call, half the cost of encoding a small object; this
    builds it once. Without the circular-reference check: a cycle is a RecursionError instead of a ValueError.
    """
    encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan)
    make: Any = getattr(json.encoder, "c_make_encoder", None)  # the C accelerator, not in the typed stubs
    if make is None:  # another Python implementation: the plain encoder
        return encoder.encode
    chunks = make(None, encoder.default, encode_basestring, None, ":", ",", False, False, allow_nan)

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


def refuse_constant(name: str) -> Any:
    """A ``parse_constant`` for :func:`loads` that refuses ``NaN`` and ``Infinity`` (not JSON; jsonb refuses them)."""
    raise ValueError(name)


_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
_HUGE_NUMBER = re.compile(rb"[0-9](?:[eE][+-]?[0-9]{3}|[0-9]{299})")
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_DIGIT_FOLD = bytes.maketrans(b"0123456789E", b"0000000000e")
_DIGIT_RUN = b"0" * 300


def _suspect(raw: bytes, numbers: bool) -> bool:
    # Substring tests first: one alternation regex over every byte cost ~4x as much (a hot path). The rare
    # byte of each test is looked for alone first, so a plain body costs a few memchr-speed scans.
    # %5C: a form field's percent-encoded backslash, which may start a \u0000 escape once decoded.
    if b"\x00" in raw:
        return True
    if b"%" in raw and (b"%00" in raw or b"%5C" in raw or b"%5c" in raw):
        return True
    if b"\\" in raw and _ESCAPE.search(raw) is not None:
        return True
    if not numbers:
        return False
    # _HUGE_NUMBER needs a digit, an exponent of three digits or more, or 300 digits in a row; with the digits
    # folded to "0" these are plain substring tests, so its regex (half of this function's time) runs only then.
    folded = raw.translate(_DIGIT_FOLD)
    if b"0e000" not in folded and b"0e+000" not in folded and b"0e-000" not in folded and _DIGIT_RUN not in folded:
        return False
    return _HUGE_NUMBER.search(raw) is not None


def unstorable(raw: bytes, payload: object, *, floats: bool = True) -> str | None:
    """Why PostgreSQL's jsonb cannot hold this payload (NUL, lone surrogate, infinite number), or None.

    ``floats=False``: the caller knows ``payload`` holds no float (its parser saw none), so no number is looked for.
    """
    if not _suspect(raw, floats):
        return None  # the common case costs a few scans of the raw bytes
    return _walk(payload)


def _walk(payload: object) -> str | None:
    """The first unstorable value in ``payload``, visited with an explicit stack (never recursion)."""
    pending = [payload]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if _BAD_CHAR.search(value):
                return "text contains a NUL character or a lone surrogate"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return "a number is too large to store"
        elif isinstance(value, dict):
            pending += value.keys()
            pending += value.values()
        elif isinstance(value, list):
            pending += value
    return None
