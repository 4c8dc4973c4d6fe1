"""The admin API under ``/v1`` (ARCHITECTURE §9, §11): bearer ``hgk_`` keys, one module per resource.

``routes`` mounts every endpoint plus ``GET /openapi.json``, generated from the same pydantic models the
endpoints validate with; it also documents the runtime API and the webhook ingress.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from gateway.admin import (
    agents,
    attempts,
    audit,
    autopilots,
    channels,
    deliveries,
    issues,
    members,
    payload_filters,
    runs,
    triggers,
)
from gateway.admin.openapi import Endpoint, document

ENDPOINTS: list[Endpoint] = [
    *members.api.items, *agents.api.items, *autopilots.api.items, *triggers.api.items, *payload_filters.api.items,
    *runs.api.items,
    *deliveries.api.items, *issues.api.items, *attempts.api.items, *audit.api.items, *channels.api.items,
]


@cache
def openapi_document() -> dict[str, Any]:
    """The whole HTTP surface: admin endpoints, runtime API, webhook ingress (built once, on first use)."""
    from gateway import hooks_openapi, runtime  # they import this package's openapi module: not at import time

    return document(ENDPOINTS, "1", [*runtime.OPERATIONS, *hooks_openapi.OPERATIONS])


async def openapi_json(request: Request) -> JSONResponse:
    """The OpenAPI 3.1 document of every HTTP API (no key needed)."""
    return JSONResponse(openapi_document())


routes: list[BaseRoute] = [Route("/openapi.json", openapi_json, methods=["GET"]), *(e.route() for e in ENDPOINTS)]
