"""Every error a client sees is JSON ``{"error": "<code>", "message": "…"}``; never a stack trace."""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from hookgate.errors import HookgateError

log = logging.getLogger("hookgate.http")

_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    409: "conflict", 413: "payload_too_large", 415: "unsupported_media_type", 422: "invalid_request",
    429: "rate_limited", 500: "internal_error", 503: "unavailable",
}


class ApiError(HookgateError):
    """An error with its HTTP status and machine-readable code, raised by handlers, rendered as JSON."""

    def __init__(self, status: int, code: str, message: str = "", headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(message or code)
        self.status, self.code, self.message, self.headers, self.extra = status, code, message, headers, extra


def error_response(status: int, code: str, message: str = "", headers: dict[str, str] | None = None,
                   **extra: Any) -> JSONResponse:
    """The one JSON error shape."""
    return JSONResponse({"error": code, "message": message or code.replace("_", " "), **extra},
                        status_code=status, headers=headers)


async def api_error(request: Request, exc: Exception) -> Response:
    """Render an :class:`ApiError`."""
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers, **exc.extra)


async def http_error(request: Request, exc: Exception) -> Response:
    """Render Starlette's own HTTP errors (404 route, 405 method) in our shape."""
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, _CODES.get(exc.status_code, "error"), str(exc.detail),
                          dict(exc.headers) if exc.headers else None)


async def client_gone(request: Request, exc: Exception) -> Response:
    """The client left while its body was being read: nobody hears the answer, and it is not a bug."""
    return error_response(400, "client_disconnected", "the client left before sending its whole body")


async def unhandled(request: Request, exc: Exception) -> Response:
    """A bug: answer a bare 500 with no detail (``gateway.access`` logged it with the request id)."""
    return error_response(500, "internal_error", "internal error")


HANDLERS = {ApiError: api_error, HTTPException: http_error, ClientDisconnect: client_gone, Exception: unhandled}
