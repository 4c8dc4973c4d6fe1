"""A webhook trigger's payload filter in the admin API: its validation on save, and ``filter-test``.

The language is :mod:`autopilot.payload_filter`'s. A filter is validated wherever the API receives one (a
422 ``invalid_request`` whose message names the faulty position as a pointer into the filter,
``payload_filter: at /and/1/gt: …``). ``POST /v1/triggers/{id}/filter-test`` evaluates the trigger's
filter (or a candidate sent with the request) against a stored delivery's body or a given payload, and
says whether it matches and which node decided; it writes nothing, so any member who can read the
trigger may call it.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from autopilot import payload_filter as pf
from gateway.admin import auth
from gateway.admin.openapi import Call, Endpoints
from gateway.errors import ApiError
from sql import Q

api = Endpoints("Triggers")

_EXAMPLE = {"and": [{"path": "/action", "eq": "opened"}, {"path": "/pull_request/draft", "eq": False}]}


ERROR_TYPE = "payload_filter"
"""The ``type`` of a refused filter among a 422's ``detail`` entries (the code is ``invalid_request``)."""


def _valid(node: dict[str, Any]) -> dict[str, Any]:
    """Refuse a filter that does not parse, naming the position of its fault."""
    try:
        pf.parse(node)
    except pf.FilterError as exc:
        raise PydanticCustomError(ERROR_TYPE, "at {at}: {why}", {"at": exc.at or "/", "why": exc.why}) from None
    return node


PayloadFilter = Annotated[dict[str, Any], AfterValidator(_valid), Field(
    description="Admits only the deliveries whose body matches (docs/PROVIDERS.md, \"Payload filters\"): a test "
                "`{\"path\": JSON pointer, OP: value}` with one OP of eq, ne, in, prefix, exists, gt, gte, lt, lte; "
                f"or `{{\"and\": [...]}}`, `{{\"or\": [...]}}`, `{{\"not\": node}}`. At most {pf.MAX_NODES} nodes, "
                f"{pf.MAX_DEPTH} levels deep.",
    examples=[_EXAMPLE])]
"""A payload filter as the API accepts it: validated by :func:`autopilot.payload_filter.parse`."""


class FilterTestIn(BaseModel):
    """What to evaluate: a stored delivery's body or a given payload; the trigger's filter unless one is sent."""

    model_config = ConfigDict(extra="forbid")
    delivery_id: UUID | None = None
    payload: Any = None
    """A body as the filter sees it: a JSON object or array, a form's fields as an object, a text body's string."""
    filter: PayloadFilter | None = None
    """A candidate filter to try before saving it; absent: the trigger's own."""

    @model_validator(mode="after")
    def _one_of(self) -> FilterTestIn:
        if (self.delivery_id is None) == ("payload" not in self.model_fields_set):
            raise ValueError("send exactly one of delivery_id and payload")
        return self


class FilterTestOut(BaseModel):
    """The verdict: ``node`` is the deciding node as a pointer into the filter (null: there is no filter)."""

    matches: bool
    reason: str
    node: str | None


async def _payload_of_delivery(call: Call, delivery_id: UUID) -> Any:
    """The body a delivery of the caller's workspace was filtered on (its envelope's payload), or 404."""
    row = auth.found(await call.conn.fetchrow(Q.delivery_get, call.principal.workspace_id, delivery_id), "delivery")
    if row["envelope"] is None:
        raise ApiError(409, "body_gone", "the delivery's body is no longer stored (retention)")
    return row["envelope"].get("payload")


@api.add("POST", "/v1/triggers/{trigger_id}/filter-test", summary="Test a payload filter", response=FilterTestOut,
         body=FilterTestIn)
async def filter_test(call: Call) -> FilterTestOut:
    """Whether a stored delivery's body (``delivery_id``) or a ``payload`` matches, and which node decided."""
    body: FilterTestIn = call.body
    row = await call.scoped(Q.trigger_get, "trigger")
    await auth.autopilot_of(call.conn, call.principal, row["autopilot_id"])
    if row["kind"] != "webhook":
        raise ApiError(409, "not_a_webhook_trigger", "only webhook triggers have payload filters")
    payload = body.payload if body.delivery_id is None else await _payload_of_delivery(call, body.delivery_id)
    source = body.filter if body.filter is not None else row["payload_filter"]
    if source is None:
        return FilterTestOut(matches=True, reason="the trigger has no payload filter: every body matches", node=None)
    verdict = pf.evaluate(pf.load(source), payload)
    return FilterTestOut(matches=verdict.matches, reason=verdict.reason, node=verdict.node)
