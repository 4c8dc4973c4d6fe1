"""Request bodies into the run envelope: `{"event", "payload", "request": {...}}` (ARCHITECTURE §4 step 5).

Errors (the ingress maps `code` to the HTTP status):

    BodyError                 base; `code` and a short `detail` that never echoes the input
    ├── InvalidBody           "invalid_body", 400: empty, not UTF-8, invalid or scalar JSON
    │   └── NestedTooDeep     "invalid_body", 400: JSON nested deeper than `hookgate.jsontext.MAX_DEPTH`
    └── UnsupportedMediaType  "unsupported_media_type", 415: neither JSON, a form, text nor XML

Choices:
- The body is always decoded as UTF-8 (ASCII included); a `charset` parameter is accepted and ignored.
  A leading UTF-8 BOM is dropped.
- A missing or empty Content-Type is read as JSON: curl and many small senders omit it, and JSON is
  what a webhook almost always is. A body that is not JSON then fails as `invalid_body`.
- JSON means `application/json` or any `<type>/<subtype>+json`. It must be an object or an array;
  `NaN`/`Infinity` are refused (not JSON) and so is nesting deeper than `hookgate.jsontext.MAX_DEPTH` (64),
  checked before parsing, so nothing downstream recurses deeper.
- A form (`application/x-www-form-urlencoded`) becomes an object of strings; a key sent more than once
  keeps every value, as a list in arrival order, so nothing a sender signed is lost.
- A form whose only field is `payload` holding a JSON object or array (Slack interactivity, GitHub's
  form-encoded webhooks) becomes that JSON. The form wrapper adds nothing; the raw body is stored anyway.
  Embedded JSON nested too deep is refused like a JSON body, not kept as a string.
- Text (`text/*`) and XML (`application/xml`, `application/*+xml`) bodies are kept as they are: the payload
  is the decoded text (a JSON string), and the envelope's `request.format` says `text` (else `json` or
  `form`). Nothing is parsed out of them: a sender of text names its events by header or query.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from hookgate import jsontext

__all__ = [
    "BodyError",
    "InvalidBody",
    "NestedTooDeep",
    "Payload",
    "UnsupportedMediaType",
    "body_format",
    "build_envelope",
    "envelope_text",
    "form_fields",
    "is_json_type",
    "media_type",
    "parse_body",
    "parse_body_with_text",
    "rfc3339",
]

Payload = dict[str, Any] | list[Any] | str
"""A parsed webhook body: a JSON object or array (JSON and forms), or the text of a text or XML body."""

_BOM = b"\xef\xbb\xbf"
_ENCODE = jsontext.compact_encoder(allow_nan=True)  # as the database's jsonb codec encodes (hookgate/database.py)
_FORM = "application/x-www-form-urlencoded"


class BodyError(Exception):
    """A request body the gateway will not store; `code` is the public error code."""

    code = "invalid_body"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidBody(BodyError):
    """The body is empty, not UTF-8, not valid JSON, or JSON that is not an object or array."""

    code = "invalid_body"


class NestedTooDeep(InvalidBody):
    """The JSON nests deeper than `hookgate.jsontext.MAX_DEPTH`."""


class UnsupportedMediaType(BodyError):
    """The Content-Type is neither JSON nor a urlencoded form."""

    code = "unsupported_media_type"


def media_type(content_type: str | None) -> str:
    """The lower-cased `type/subtype` of a Content-Type header, without parameters; "" if absent."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_json_type(mtype: str) -> bool:
    """Whether a media type (from `media_type`) is JSON; "" (no Content-Type) counts as JSON."""
    return mtype in ("", "application/json") or (mtype.endswith("+json") and "/" in mtype)


def parse_body(raw: bytes, content_type: str | None) -> Payload:
    """A webhook body as a JSON object or array (JSON, forms) or its text (text/*, XML); a `BodyError` if not."""
    return parse_body_with_text(raw, content_type)[0]


def parse_body_with_text(raw: bytes, content_type: str | None) -> tuple[Payload, str | None]:
    """`parse_body`, and the body's JSON text when it denotes the payload exactly as encoding it would, else None.

    None for a form or a text body, and for JSON with a number that has a fraction or an exponent: its
    float would not print back as sent (`1.10`, `1e2`). Integers, strings, literals and structure do, and
    PostgreSQL's jsonb keeps the last of duplicate keys as `json.loads` does, so the ingress stores this text
    as the envelope's payload instead of encoding the parsed payload again (see `envelope_text`).
    """
    kind = body_format(media_type(content_type))
    if kind is None:
        raise UnsupportedMediaType("expected JSON, a urlencoded form, text/* or XML")
    text = _decode(raw)
    if not text.strip():
        raise InvalidBody("empty body")
    if kind == "form":
        return _form_payload(form_fields(text)), None
    if kind == "text":
        return text, None
    floats = _FLOATS
    floats.seen = False
    payload = _json_payload(text, floats.decoder)
    return payload, None if floats.seen else text


def body_format(mtype: str) -> str | None:
    """`json`, `form` or `text` for a media type (from `media_type`) the ingress accepts, else None."""
    if is_json_type(mtype):
        return "json"
    if mtype == _FORM:
        return "form"
    if mtype.startswith("text/") or mtype == "application/xml" or (mtype.endswith("+xml") and "/" in mtype):
        return "text"
    return None


def form_fields(text: str) -> list[tuple[str, str]]:
    """The (name, value) pairs of a urlencoded form, in order; `InvalidBody` if not UTF-8 once unquoted."""
    try:
        return parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise InvalidBody("form field is not valid UTF-8 once percent-decoded") from None


def build_envelope(
    event: str, payload: Payload, received_at: datetime, content_type: str | None
) -> dict[str, Any]:
    """The envelope a run carries; `received_at` must be timezone-aware and is rendered in UTC."""
    return {
        "event": event,
        "payload": payload,
        "request": {"received_at": rfc3339(received_at), "content_type": content_type,
                    "format": body_format(media_type(content_type)) or "json"},
    }


def envelope_text(envelope: dict[str, Any], payload_text: str | None) -> str:
    """`envelope` (from `build_envelope`) as JSON text, its payload spliced in as `payload_text` when given.

    `payload_text` is the body's own text (`parse_body_with_text`): encoding the parsed payload again cost the
    ingress 4-7 µs per 1 KiB webhook (best of 20 in process; more on a loaded host), for the same jsonb once
    PostgreSQL parsed it.
    """
    if payload_text is None:
        return _ENCODE(envelope)
    return (f'{{"event":{_ENCODE(envelope["event"])},"payload":{payload_text},'
            f'"request":{_ENCODE(envelope["request"])}}}')


def rfc3339(moment: datetime) -> str:
    """An aware datetime as RFC 3339 UTC with microseconds, e.g. `2024-05-01T12:00:00.000000Z`."""
    if moment.tzinfo is UTC:  # the ingress's own clock: no conversion (2.6 -> 0.9 µs, best of 5 in process)
        return moment.isoformat(timespec="microseconds")[:-6] + "Z"
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("received_at must be timezone-aware")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _decode(raw: bytes) -> str:
    try:
        return raw.removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidBody("body is not valid UTF-8") from None


class _Floats(threading.local):
    """Per thread, a JSON decoder built once, whose ``parse_float`` notes a number with a fraction or exponent.

    ``json.loads`` with options builds a decoder per call: 3.6 of its 8.3 µs for a 1 KiB body (best of 5).
    """

    def __init__(self) -> None:
        self.seen = False
        self.decoder = json.JSONDecoder(parse_constant=jsontext.refuse_constant, parse_float=self._float)

    def _float(self, text: str) -> float:
        self.seen = True
        return float(text)


_FLOATS = _Floats()
_PLAIN = json.JSONDecoder(parse_constant=jsontext.refuse_constant)


def _json_payload(text: str, decoder: json.JSONDecoder = _PLAIN) -> Payload:
    try:
        value = jsontext.decode(text, decoder)
    except jsontext.TooDeep:
        raise NestedTooDeep(f"invalid JSON: nested too deeply (over {jsontext.MAX_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise InvalidBody(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError:  # NaN/Infinity, or an integer longer than Python's digit limit
        raise InvalidBody("invalid JSON: unsupported number") from None
    if not isinstance(value, dict | list):
        raise InvalidBody("JSON body must be an object or an array")
    return value


def _form_payload(fields: list[tuple[str, str]]) -> Payload:
    if len(fields) == 1 and fields[0][0] == "payload":
        embedded = _embedded_json(fields[0][1])
        if embedded is not None:
            return embedded
    form: dict[str, Any] = {}
    for name, value in fields:
        if name not in form:
            form[name] = value
        elif isinstance(form[name], list):
            form[name].append(value)
        else:
            form[name] = [form[name], value]
    return form


def _embedded_json(text: str) -> Payload | None:
    try:
        return _json_payload(text)
    except NestedTooDeep:
        raise
    except InvalidBody:
        return None
