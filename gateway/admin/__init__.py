"""The admin API under ``/v1`` (ARCHITECTURE §9, §11): bearer ``hgk_`` keys, one module per resource.

``routes`` mounts every endpoint plus ``GET /openapi.json``, generated from the same pydantic models the
endpoints validate with.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from gateway.admin import agents, audit, autopilots, deliveries, issues, members, runs, triggers
from gateway.admin.openapi import Endpoint, document

ENDPOINTS: list[Endpoint] = [
    *members.api.items, *agents.api.items, *autopilots.api.items, *triggers.api.items, *runs.api.items,
    *deliveries.api.items, *issues.api.items, *audit.api.items,
]
_DOCUMENT = document(ENDPOINTS, "1")


async def openapi_json(request: Request) -> JSONResponse:
    """The OpenAPI 3.1 document of the admin API (no key needed)."""
    return JSONResponse(_DOCUMENT)


routes: list[BaseRoute] = [Route("/openapi.json", openapi_json, methods=["GET"]), *(e.route() for e in ENDPOINTS)]
