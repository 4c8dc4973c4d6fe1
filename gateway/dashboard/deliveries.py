"""Deliveries: search and filter with cursor paging, one delivery's page, and its replay.

A delivery page answers "what happened to my webhook?": the selected request headers (signature values
are never stored, only their presence), the payload, the signature verdict in a plain sentence (did it
verify, and if not why, naming the header the provider's preset checks, its value masked) with the usual
cause of a rejection, dedupe key and counts, its replays and original, and its run.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway import overload, schemes
from gateway.admin import auth, pagination
from gateway.admin.pagination import PageQuery
from gateway.dashboard.web import Denied, admin_read, admin_write, confirm, confirmed, ctx_of, uuid_param, viewer
from gateway.errors import ApiError
from sql import Q

log = logging.getLogger("hookgate.dashboard")
PAGE_SIZE = 50
STATUSES = ("queued", "dispatched", "ignored", "rejected", "failed")

#: The usual cause of each rejection (docs/PROVIDERS.md, "When a delivery is rejected").
REJECTION_HINTS = {
    "missing_signature": "No secret configured on the provider's side, or the wrong preset (it looks for "
                         "another header).",
    "invalid_signature": "A different secret on each side (a Stripe secret copied without whsec_, a Standard "
                         "Webhooks secret without it, a secret rotated on one side only), or a proxy that "
                         "rewrote the body.",
    "expired_timestamp": "The signature is right but the timestamp is more than 5 minutes (Linear: 1 minute) "
                         "away from the gateway's clock: a clock off on one side, or a request replayed late.",
}


#: Signature headers a preset keeps the presence of but never checks (GitHub's legacy SHA-1 header).
UNCHECKED_HEADERS = frozenset({"x-hub-signature"})

#: The signature verdict in plain words, by ``signature_status``; ``{header}`` is the header checked.
VERDICTS = {
    "valid": "The signature verified: {header} matches the body signed with this trigger's signing secret.",
    "invalid": "The signature did not verify: the {header} header does not match the signature the gateway "
               "computed over the body with this trigger's signing secret{secret}. The request was refused "
               "(HTTP 401) and nothing ran.",
    "missing": "The signature did not verify: the request has no {header} header, while this trigger has a signing "
               "secret{secret}, so every request must be signed. The request was refused (HTTP 401) and nothing "
               "ran.",
    "expired": "The signature did not verify in time: {header} matches, but its timestamp is too far from the "
               "gateway's clock, so it was refused as a possible replay (HTTP 401) and nothing ran.",
    "not_required": "No signature was checked: this trigger has no signing secret, so the secret token in its URL "
                    "is the only credential.",
}


def header_title(name: str) -> str:
    """``x-hub-signature-256`` as providers document it: ``X-Hub-Signature-256``."""
    return "-".join(part[:1].upper() + part[1:] for part in name.split("-"))


def signature_explained(provider: str, status: str, headers: dict[str, Any] | None, secret_hint: str | None
                        ) -> dict[str, Any]:
    """The verdict sentence and each header the provider's preset checks: present (value masked) or absent.

    Signature values are never stored, so "masked" is all a page can show; what it can say is which header
    was looked at, whether the request had it, and which secret it was checked against (its last characters).
    """
    try:
        preset = schemes.get_preset(provider)
        names = sorted(preset.signature_headers - UNCHECKED_HEADERS)
    except ValueError:  # a provider preset removed since the delivery arrived
        names = []
    kept = headers or {}
    checked = [{"name": header_title(n), "present": n in kept} for n in names]
    header = " or ".join(header_title(n) for n in names) or "signature"
    secret = f" (the secret ending in …{secret_hint})" if secret_hint else ""
    text = VERDICTS.get(status, "Signature status: {header} " + status).format(header=header, secret=secret)
    return {"text": text, "checked": checked, "ok": status in ("valid", "not_required")}


class Search(BaseModel):
    """The filters of the delivery list (empty fields mean "any"); times without a zone are UTC."""

    model_config = ConfigDict(extra="ignore")
    trigger_id: UUID | None = None
    autopilot_id: UUID | None = None
    status: Literal["queued", "dispatched", "ignored", "rejected", "failed"] | None = None
    event: str | None = Field(default=None, max_length=200)
    dedupe_key: str | None = Field(default=None, max_length=500)
    since: datetime | None = None
    until: datetime | None = None
    cursor: str | None = Field(default=None, max_length=200)

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    def filters(self) -> dict[str, str]:
        """The filters as sent (for the form and the next page's link), without the cursor."""
        return {k: str(v) for k, v in self.model_dump(mode="json", exclude={"cursor"}, exclude_none=True).items()}


def _search(params: dict[str, str]) -> Search:
    try:
        return Search.model_validate({k: v.strip() for k, v in params.items() if v.strip()})
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
        raise Denied(400, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def event_pattern(event: str | None) -> str | None:
    """A shell-style glob (``*``, ``?``) as an ILIKE pattern; plain text matches the whole event name."""
    if event is None:
        return None
    escaped = event.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


def _cursor(search: Search) -> UUID | None:
    try:
        return pagination.uuid_after(PageQuery(cursor=search.cursor))
    except ApiError as exc:
        raise Denied(400, exc.message) from None


async def list_deliveries(request: Request) -> Response:
    """The newest deliveries matching the filters, 50 a page, with a link to the next page."""
    v = await viewer(request)
    search = _search(dict(request.query_params))
    async with overload.connection(ctx_of(request)) as conn:
        rows = await conn.fetch(
            Q.dashboard_delivery_search, v.workspace_id, search.trigger_id, search.autopilot_id, search.status,
            event_pattern(search.event), search.dedupe_key, search.since, search.until, _cursor(search),
            PAGE_SIZE + 1)
    shown = rows[:PAGE_SIZE]
    next_cursor = pagination.encode(shown[-1]["id"]) if len(rows) > PAGE_SIZE else None
    return v.render("deliveries.html", rows=shown, filters=search.filters(), statuses=STATUSES,
                    next_cursor=next_cursor, paged=search.cursor is not None)


async def delivery(request: Request) -> Response:
    """One delivery as the admin API shows it to this member, with its context, replays and run."""
    v = await viewer(request)
    delivery_id = uuid_param(request.path_params["delivery_id"], "delivery")
    async with overload.connection(ctx_of(request)) as conn:
        row = await admin_read(v, conn, "GET", "/v1/deliveries/{delivery_id}", {"delivery_id": delivery_id})
        context = await conn.fetchrow(Q.dashboard_delivery_context, v.workspace_id, delivery_id)
        replays = await conn.fetch(Q.dashboard_delivery_replays, v.workspace_id, delivery_id)
        autopilot = await auth.autopilot_of(conn, v.principal, row["autopilot_id"])
        writer = await auth.can_write(conn, v.principal, autopilot)
    explained = signature_explained(row["provider"], row["signature_status"], row.get("headers"),
                                    context["signing_secret_hint"] if context else None)
    return v.render("delivery.html", d=row, context=context, replays=replays, writer=writer,
                    payload=_payload(row), hint=REJECTION_HINTS.get(row["reason_code"] or ""), signature=explained,
                    dispatch=dispatch_attempts(row), replayed=request.query_params.get("replayed") == "1")


def dispatch_attempts(row: dict[str, Any]) -> str:
    """How many times the gateway tried to make the delivery's run, in words.

    ``dispatch_attempts`` counts the failed tries only (it paces the retries); the try that made the run, for a
    ``dispatched`` delivery, is one more.
    """
    failed: int = row["dispatch_attempts"]
    if row["status"] == "dispatched":
        return "1 dispatch attempt (it made the run)" if failed == 0 else \
            f"{failed + 1} dispatch attempts (the last made the run)"
    if failed == 0:
        return "none yet" if row["status"] == "queued" else "none"
    return f"{failed} failed dispatch attempt{'s' if failed != 1 else ''}"


def _payload(row: dict[str, Any]) -> Any:
    """What the provider sent: the stored body, else (body dropped after retention) the envelope's payload."""
    if row.get("body") is not None:
        return row["body"]
    envelope = row.get("envelope")
    return envelope.get("payload") if isinstance(envelope, dict) else None


async def replay(request: Request) -> Response:
    """Replay a delivery as a new one (writers of its autopilot), after a confirmation page."""
    v = await viewer(request, post=True)
    delivery_id = uuid_param(request.path_params["delivery_id"], "delivery")
    path = f"/dashboard/deliveries/{delivery_id}"
    if not confirmed(v):
        async with overload.connection(ctx_of(request)) as conn:
            row = await admin_read(v, conn, "GET", "/v1/deliveries/{delivery_id}", {"delivery_id": delivery_id})
        return confirm(v, "Replay this delivery as a new one?",
                       [("Delivery", str(delivery_id)), ("Event", row["event"]), ("Status", row["status"])], path)
    made = await admin_write(v, "POST", "/v1/deliveries/{delivery_id}/replay", {"delivery_id": delivery_id})
    log.info("dashboard replay", extra={"delivery_id": str(delivery_id), "new_delivery_id": made["delivery_id"]})
    return RedirectResponse(f"/dashboard/deliveries/{made['delivery_id']}?replayed=1", status_code=303)


