"""Structured JSON logs, one line per event, with every credential redacted before it is written."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
from datetime import UTC, datetime
from typing import Any

# awt_/hgk_/hgr_ tokens and whsec_ secrets; anything that looks like one is masked wherever it appears:
# also glued to a word ("Bearerhgr_…", "%3Dhgr_…" in an encoded URL, so no \b) and with a whsec_'s
# "+", "/" and "=" percent-encoded (otherwise the part after the first "%2B" would stay readable).
_SECRET = re.compile(r"(awt|hgk|hgr)_[A-Za-z0-9_\-]{8,}|whsec_(?:[A-Za-z0-9+/=_\-]|%[0-9A-Fa-f]{2}){8,}")
# The user-info part of any URL (an agent URL stored with credentials, a database URL with a password).
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@?#'\"]+@")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName", "color_message",
}


# Fields known about the work in hand (request_id, trigger_id, delivery_id, run_id, …), added to every
# record logged while they are bound. A dict per scope, mutated in place by ``bind`` so that a value
# bound deep inside a handler is visible to the middleware that wraps it (same object, same request).
_bound: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("hookgate_log_context", default=None)
# Fields of the whole process, in every record (``bind_process``).
_process: dict[str, Any] = {}


class Scope:
    """A log scope (one request, one claimed item): its fields go into every record logged inside.

    A plain class rather than a generator context manager: one is opened per HTTP request, and this is
    several times cheaper.
    """

    __slots__ = ("_token", "fields")

    def __init__(self, fields: dict[str, Any]) -> None:
        outer = _bound.get()
        self.fields = {**outer, **fields} if outer else fields

    def __enter__(self) -> dict[str, Any]:
        self._token = _bound.set(self.fields)
        return self.fields

    def __exit__(self, *exc: object) -> None:
        _bound.reset(self._token)


def scope(**fields: Any) -> Scope:
    """Open a log scope with ``fields`` (``None`` values are left out); use it in a ``with``."""
    return Scope({k: v for k, v in fields.items() if v is not None})


def bind(**fields: Any) -> None:
    """Add fields (e.g. ``trigger_id=…, delivery_id=…``) to the current scope; no-op outside one."""
    current = _bound.get()
    if current is not None:
        current.update({k: v for k, v in fields.items() if v is not None})


def bind_process() -> None:
    """Put this process's ``pid`` in every record it logs: the gateway processes of ``--workers`` share a stderr."""
    _process["pid"] = os.getpid()


def bound() -> dict[str, Any]:
    """The fields of the current scope (a copy)."""
    return dict(_bound.get() or {})


def redact(text: str) -> str:
    """Mask every token or secret in ``text`` (keeping its prefix so the kind stays visible) and URL credentials."""
    masked = _SECRET.sub(lambda m: m.group(0).split("_", 1)[0] + "_[redacted]", text)
    return _USERINFO.sub(r"\1***@", masked)


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object: time, level, logger, message, and any ``extra=`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        """One JSON line, credentials masked."""
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_process)
        entry.update(_bound.get() or {})
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, default=str, ensure_ascii=False))


def configure(level: str = "info") -> None:
    """Route every logger (ours, uvicorn's, asyncpg's) to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
