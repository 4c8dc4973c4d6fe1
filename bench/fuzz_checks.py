"""Schemathesis checks of bench/fuzz.py (loaded with SCHEMATHESIS_HOOKS=bench.fuzz_checks).

``json_error_codes``: every 4xx/5xx answer is a JSON object with a string ``error`` code, no answer
carries a Python stack trace, and no answer echoes the caller's bearer key or token.
"""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.check
def json_error_codes(ctx: Any, response: Any, case: Any) -> bool | None:
    """Errors are ``{"error": "<code>", ...}``; nothing looks like a traceback."""
    text = response.text or ""
    if "Traceback (most recent call last)" in text or 'File "/' in text:
        raise AssertionError("stack trace in the response")
    sent = getattr(getattr(response, "request", None), "headers", None) or case.headers or {}
    bearer = str(sent.get("Authorization", "")).removeprefix("Bearer ").strip()
    if len(bearer) > 8 and bearer in text:
        raise AssertionError("the caller's bearer credential is echoed in the response")
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError as exc:
            raise AssertionError(f"{response.status_code} answer is not JSON: {text[:200]!r}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("error"), str):
            raise AssertionError(f"{response.status_code} answer has no error code: {text[:200]!r}")
    return None
