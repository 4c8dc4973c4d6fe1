"""Structured JSON logs, one line per event, with every credential redacted before it is written."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

# awt_/hgk_/hgr_ tokens and whsec_ secrets; anything that looks like one is masked wherever it appears.
_SECRET = re.compile(r"\b(awt|hgk|hgr)_[A-Za-z0-9_\-]{8,}|whsec_[A-Za-z0-9+/=_\-]{8,}")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName", "color_message",
}


def redact(text: str) -> str:
    """Mask every token or secret in ``text``, keeping its prefix so the kind stays visible."""
    return _SECRET.sub(lambda m: m.group(0).split("_", 1)[0] + "_[redacted]", text)


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
