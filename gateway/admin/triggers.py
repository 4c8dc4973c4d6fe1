"""Triggers: webhook (secret per-trigger URL, provider preset, event and payload filters, rate limit) and schedule.

Only writers of the autopilot see a webhook trigger's token and URL; everyone else gets the trigger
without them. Rotation replaces the token's digest, so the old URL answers 404 on every gateway process
as soon as it commits. Signing secrets are write-only (a last-4 hint is shown) and may keep the previous
secret verifying for a grace window. Schedule triggers are validated, planned and previewed by the
scheduler's own cron code, and every schedule change wakes the schedulers (``hookgate_triggers``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal
from uuid import UUID

import asyncpg
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, RootModel, model_validator

from autopilot import editing, rules
from autopilot.rules import Publisher
from gateway import handshakes, providers, schemes
from gateway.admin import auth, pagination
from gateway.admin.openapi import Call, Endpoints, patch_fields
from gateway.admin.pagination import Page, PageQuery
from gateway.admin.payload_filters import PayloadFilter
from gateway.errors import ApiError
from gateway.replies import SuccessReply
from hookgate import notify
from hookgate.database import Conn
from scheduler.cron import InvalidSchedule, Schedule
from sql import Q

api = Endpoints("Triggers")
Provider = Literal[
    "generic", "github", "gitlab", "stripe", "slack", "shopify", "standard", "linear", "twilio",
    "meta", "zoom", "dropbox", "paddle", "intercom", "discord", "sendgrid", "custom"]
"""Every preset (gateway/schemes.py ``preset_names``) and `custom`."""
Overlap = Literal["skip", "buffer_one", "allow"]
EventFilter = Annotated[str, Field(min_length=1, max_length=200)]
FIELD_CODES = {"handshake": "invalid_handshake", "reply": "invalid_reply"}
"""The error code of a refused field, where it is not `invalid_request`."""


def _source(text: str) -> str:
    """A header source's name is matched lower-cased (as headers are read and stored)."""
    kind, _, name = text.partition(":")
    return f"header:{name.lower()}" if kind == "header" else text


Source = Annotated[str, Field(max_length=300, pattern=providers.SOURCE_PATTERN), AfterValidator(_source)]
"""Where a trigger reads its dedupe key or event name: `header:NAME`, `json:/pointer`, `form:FIELD`, `query:NAME`."""


def _printable(secret: str) -> str:
    """Providers issue secrets with spaces and punctuation (GitHub's own example has both); no control chars."""
    if not secret.isprintable():
        raise ValueError("a signing secret holds printable characters only (spaces allowed, no control characters)")
    return secret


SigningSecret = Annotated[str, Field(min_length=8, max_length=500), AfterValidator(_printable)]
"""A provider's signing secret as issued: 8–500 printable characters, spaces included."""


class WebhookTriggerIn(BaseModel):
    """A webhook trigger (cron and timezone are refused here)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["webhook"]
    provider: Provider = "generic"
    event_filters: list[EventFilter] = Field(default_factory=list, max_length=100)
    rate_limit_per_minute: int = Field(default=60, ge=1, le=1_000_000)
    signature: schemes.Scheme | None = None
    """How the sender is checked (docs/PROVIDERS.md, "Custom"); required for `custom`, else the preset's own."""
    dedupe_key_source: Source | None = None
    event_source: Source | None = None
    handshake: handshakes.Handshake | None = None
    """The provider's URL check to answer (docs/PROVIDERS.md, "Handshakes"); absent: the preset's own, if any."""
    reply: SuccessReply | None = None
    """The answer to accepted and duplicate deliveries; absent: the JSON receipt."""
    payload_filter: PayloadFilter | None = None

    @model_validator(mode="before")
    @classmethod
    def _hmac_by_default(cls, data: Any) -> Any:
        return schemes.default_kind(data)


class ScheduleTriggerIn(BaseModel):
    """A cron schedule read in an IANA time zone."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["schedule"]
    cron: str = Field(min_length=1, max_length=200)
    timezone: str = Field(default="UTC", min_length=1, max_length=100)
    overlap_policy: Overlap = "skip"


class TriggerIn(RootModel[Annotated[WebhookTriggerIn | ScheduleTriggerIn, Field(discriminator="kind")]]):
    """A new trigger, by kind."""

    error_codes: ClassVar[dict[str, str]] = FIELD_CODES


class TriggerPatch(BaseModel):
    """Fields to change (each kind accepts only its own)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool | None = None
    cron: str | None = Field(default=None, min_length=1, max_length=200)
    timezone: str | None = Field(default=None, min_length=1, max_length=100)
    overlap_policy: Overlap | None = None
    provider: Provider | None = None
    event_filters: list[EventFilter] | None = Field(default=None, max_length=100)
    rate_limit_per_minute: int | None = Field(default=None, ge=1, le=1_000_000)
    signature: schemes.Scheme | None = None
    """A new scheme; `null` puts a preset trigger back on its preset's own check."""
    dedupe_key_source: Source | None = None
    event_source: Source | None = None
    handshake: handshakes.Handshake | None = None
    """A new handshake; `null` puts the trigger back on its preset's (`{"kind": "none"}`: no handshake)."""
    reply: SuccessReply | None = None
    """A new success reply; `null` puts back the JSON receipt."""
    payload_filter: PayloadFilter | None = None
    """A new filter; `null` admits every body again."""
    error_codes: ClassVar[dict[str, str]] = FIELD_CODES

    @model_validator(mode="before")
    @classmethod
    def _hmac_by_default(cls, data: Any) -> Any:
        return schemes.default_kind(data)


class TriggerOut(BaseModel):
    """A trigger. ``token`` and ``url`` are present only for the autopilot's writers."""

    id: UUID
    autopilot_id: UUID
    kind: Literal["webhook", "schedule"]
    enabled: bool
    provider: Provider | None = None
    signature: dict[str, Any] | None = None
    dedupe_key_source: str | None = None
    event_source: str | None = None
    handshake: dict[str, Any] | None = None
    """The trigger's own handshake (null: its preset's, see `provider`); a verify token is never shown."""
    verify_token_hint: str | None = None
    """The last four characters of a Meta handshake's verify token, when one is set."""
    reply: dict[str, Any] | None = None
    event_filters: list[str] | None = None
    payload_filter: dict[str, Any] | None = None
    rate_limit_per_minute: int | None = None
    token_hint: str | None = None
    signing_secret_hint: str | None = None
    previous_secret_expires_at: datetime | None = None
    token: str | None = None
    url: str | None = None
    cron: str | None = None
    timezone: str | None = None
    overlap_policy: Overlap | None = None
    next_fire_at: datetime | None = None
    last_fired_at: datetime | None = None
    published_by_type: Literal["member", "system"]
    published_by_id: UUID | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None


class TriggerPage(Page[TriggerOut]):
    """A page of triggers."""


class TokenOut(BaseModel):
    """A webhook trigger's new token and URL."""

    token: str
    url: str


class SecretIn(BaseModel):
    """A signing secret, or for a `public_key` scheme the sender's public key (hex, base64 DER or PEM).

    The previous one keeps verifying for ``grace_seconds``.
    """

    model_config = ConfigDict(extra="forbid")
    secret: SigningSecret | None = None
    public_key: Annotated[str, Field(min_length=16, max_length=4000)] | None = None
    grace_seconds: int = Field(default=0, ge=0, le=7 * 24 * 3600)

    @model_validator(mode="after")
    def _one_of(self) -> SecretIn:
        if (self.secret is None) == (self.public_key is None):
            raise ValueError("send exactly one of secret and public_key")
        return self


class SecretOut(BaseModel):
    """Only the last four characters of the secret (null when removed)."""

    hint: str | None


class PreviewQuery(BaseModel):
    """How many occurrences to show."""

    count: int = Field(default=5, ge=1, le=100)


class Occurrence(BaseModel):
    """One planned fire time, in UTC and in the trigger's zone."""

    utc: str
    local: str


class PreviewOut(BaseModel):
    """The next occurrences of a schedule trigger, computed by the scheduler's cron code."""

    timezone: str
    occurrences: list[Occurrence]


def _url(call: Call, token: str) -> str:
    return call.ctx.settings.public_url.rstrip("/") + "/hooks/" + token


def trigger_out(call: Call, row: asyncpg.Record, writer: bool, token: str | None = None) -> dict[str, Any]:
    """Render a trigger; writers also get its token (decrypted) and URL, others neither key."""
    out = TriggerOut.model_validate({**row, "signature": row["signature_scheme"]}).model_dump(mode="json")
    if not writer or row["kind"] != "webhook" or row["deleted_at"] is not None:
        out.pop("token"), out.pop("url")
        return out
    token = token or call.ctx.keyring.decrypt(row["token_ct"], rules.token_context(bytes(row["token_digest"])))
    return out | {"token": token, "url": _url(call, token)}


async def _trigger(call: Call) -> tuple[asyncpg.Record, asyncpg.Record]:
    """The caller's workspace's live trigger and its autopilot, or 404."""
    row = await call.scoped(Q.trigger_get, "trigger")
    return row, await auth.autopilot_of(call.conn, call.principal, row["autopilot_id"])


async def _writable_trigger(call: Call) -> tuple[asyncpg.Record, asyncpg.Record]:
    row, autopilot = await _trigger(call)
    await auth.require_writer(call.conn, call.principal, autopilot)
    return row, autopilot


async def _db_now(conn: Conn) -> datetime:
    now: datetime = await conn.fetchval(Q.server_now, None)
    return now


def _schedule(cron: str, timezone: str) -> Schedule:
    try:
        return Schedule.parse(cron, timezone)
    except InvalidSchedule as exc:
        raise ApiError(422, "invalid_schedule", str(exc)) from None


@api.add("POST", "/v1/autopilots/{autopilot_id}/triggers", summary="Create a trigger", response=TriggerOut,
         status=201, body=TriggerIn)
async def create_trigger(call: Call) -> dict[str, Any]:
    """Writers only. A webhook trigger answers its token and URL; a schedule trigger its first fire time."""
    spec = call.body.root
    autopilot = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
    await auth.require_writer(call.conn, call.principal, autopilot)
    if autopilot["status"] == "archived":
        raise ApiError(409, "archived", "an archived autopilot cannot get new triggers")
    publisher = Publisher.member(call.principal.member_id)
    if isinstance(spec, WebhookTriggerIn):
        row, token = await rules.create_webhook_trigger(
            call.conn, call.ctx.keyring, autopilot=autopilot, publisher=publisher, provider=spec.provider,
            event_filters=spec.event_filters, rate_limit_per_minute=spec.rate_limit_per_minute,
            signature_scheme=_scheme_needed(spec.provider, spec.signature), dedupe_key_source=spec.dedupe_key_source,
            event_source=spec.event_source, handshake=_handshake_stored(spec.handshake, None),
            reply=_reply_stored(spec.reply), verify_token=_verify_token(spec.handshake),
            payload_filter=spec.payload_filter)
        return trigger_out(call, row, True, token)
    schedule = _schedule(spec.cron, spec.timezone)
    async with call.conn.transaction():
        row = await rules.create_schedule_trigger(
            call.conn, autopilot=autopilot, publisher=publisher, cron=schedule.cron, timezone=schedule.timezone,
            next_fire_at=schedule.next_after(await _db_now(call.conn)), overlap_policy=spec.overlap_policy)
        await call.conn.execute(Q.notify_send, notify.TRIGGERS, str(row["id"]))
    return trigger_out(call, row, True)


@api.add("GET", "/v1/autopilots/{autopilot_id}/triggers", summary="List an autopilot's triggers",
         response=TriggerPage, query=PageQuery)
async def list_triggers(call: Call) -> dict[str, Any]:
    """Live triggers, oldest first; tokens and URLs only for writers."""
    q: PageQuery = call.query
    autopilot = await auth.autopilot_of(call.conn, call.principal, call.path["autopilot_id"])
    writer = await auth.can_write(call.conn, call.principal, autopilot)
    return await pagination.fetch(call.conn, Q.trigger_list_by_autopilot, q, lambda r: trigger_out(call, r, writer),
                                  autopilot["id"])


@api.add("GET", "/v1/triggers/{trigger_id}", summary="Get a trigger", response=TriggerOut)
async def get_trigger(call: Call) -> dict[str, Any]:
    """One live trigger; token and URL only for writers."""
    row, autopilot = await _trigger(call)
    return trigger_out(call, row, await auth.can_write(call.conn, call.principal, autopilot))


@api.add("PATCH", "/v1/triggers/{trigger_id}", summary="Edit a trigger", response=TriggerOut, body=TriggerPatch)
async def edit_trigger(call: Call) -> dict[str, Any]:
    """Writers only. A real change publishes a version and makes the editor this trigger's publisher."""
    body: TriggerPatch = call.body  # every field has a value or is left out: null is 422
    row, _ = await _writable_trigger(call)
    changes = patch_fields(body, nullable=("signature", "dedupe_key_source", "event_source", "handshake", "reply",
                                         "payload_filter"))
    if "signature" in changes:  # the model, not its dump: a scheme's defaults were not "sent" but are stored
        del changes["signature"]
        changes["signature_scheme"] = body.signature
    publisher = Publisher.member(call.principal.member_id)
    if row["kind"] == "webhook":
        _refuse(changes, ("cron", "timezone", "overlap_policy"), "webhook")
        scheme = changes.get("signature_scheme", row["signature_scheme"])
        changes["signature_scheme"] = _scheme_needed(changes.get("provider", row["provider"]), scheme)
        token_change = None
        if "handshake" in changes:
            changes["handshake"] = _handshake_stored(body.handshake, row)
            token_change = _token_change(call, body.handshake, row)
        if "reply" in changes:
            changes["reply"] = _reply_stored(body.reply)
        updated, _ = await editing.edit_webhook_trigger(call.conn, row["id"], changes, publisher,
                                                        verify_token=token_change)
        return trigger_out(call, updated, True)
    _refuse(changes, ("provider", "event_filters", "rate_limit_per_minute", "signature_scheme", "dedupe_key_source",
                      "event_source", "handshake", "reply", "payload_filter"), "schedule")
    next_fire_at = None
    # A new cron or zone, or re-enabling, plans the next occurrence from now (never a stale one).
    if "cron" in changes or "timezone" in changes or (changes.get("enabled") and not row["enabled"]):
        schedule = _schedule(changes.get("cron", row["cron"]), changes.get("timezone", row["timezone"]))
        changes |= {"cron": schedule.cron, "timezone": schedule.timezone}
        next_fire_at = schedule.next_after(await _db_now(call.conn))
    updated, _ = await editing.edit_schedule_trigger(call.conn, row["id"], changes, next_fire_at, publisher)
    return trigger_out(call, updated, True)


def _scheme_needed(provider: str, scheme: Any) -> dict[str, Any] | None:
    """The scheme to store, as JSON; a `custom` trigger without one is refused (it has no check of its own)."""
    if scheme is None and provider == "custom":
        raise ApiError(422, "invalid_request", "a custom trigger needs a signature scheme (\"signature\")")
    if scheme is None or isinstance(scheme, dict):
        return scheme
    stored: dict[str, Any] = scheme.model_dump(mode="json")
    return stored


def _handshake_stored(handshake: handshakes.AnyHandshake | None, row: asyncpg.Record | None) -> dict[str, Any] | None:
    """The handshake JSON to store; a `meta` one needs a verify token, sent now or already set (422 if not)."""
    if handshake is None:
        return None
    if (isinstance(handshake, handshakes.MetaHandshake) and handshake.verify_token is None
            and (row is None or row["verify_token_ct"] is None)):
        raise ApiError(422, "handshake_needs_verify_token",
                       "handshake.verify_token: a meta handshake needs the verify token typed into Meta's dashboard")
    return handshakes.stored(handshake)


def _verify_token(handshake: handshakes.AnyHandshake | None) -> str | None:
    return handshake.verify_token if isinstance(handshake, handshakes.MetaHandshake) else None


def _token_change(call: Call, handshake: handshakes.AnyHandshake | None,
                  row: asyncpg.Record) -> editing.VerifyTokenChange | None:
    """A new verify token with a `meta` handshake; none kept once the trigger's own handshake is another kind."""
    if (token := _verify_token(handshake)) is not None:
        return editing.VerifyTokenChange(call.ctx.keyring, token)
    if handshake is not None and not isinstance(handshake, handshakes.MetaHandshake) and row["verify_token_ct"]:
        return editing.VerifyTokenChange(call.ctx.keyring, None)
    return None


def _reply_stored(reply: SuccessReply | None) -> dict[str, Any] | None:
    return None if reply is None else reply.model_dump(mode="json")


def _refuse(changes: dict[str, Any], fields: tuple[str, ...], kind: str) -> None:
    wrong = [f for f in fields if f in changes]
    if wrong:
        raise ApiError(422, "invalid_request", f"a {kind} trigger has no {', '.join(wrong)}")


@api.add("DELETE", "/v1/triggers/{trigger_id}", summary="Delete a trigger", response=TriggerOut)
async def delete_trigger(call: Call) -> dict[str, Any]:
    """Writers only. The token stops working at once; past deliveries and runs stay readable."""
    row, _ = await _writable_trigger(call)
    deleted = await editing.delete_trigger(call.conn, row["id"], Publisher.member(call.principal.member_id))
    return trigger_out(call, deleted, True)


def _webhook_only(row: asyncpg.Record) -> None:
    if row["kind"] != "webhook":
        raise ApiError(409, "not_a_webhook_trigger", "only webhook triggers have tokens and signing secrets")


@api.add("POST", "/v1/triggers/{trigger_id}/rotate-token", summary="Rotate a webhook token", response=TokenOut)
async def rotate_token(call: Call) -> TokenOut:
    """Writers only. The old URL answers 404 on every gateway as soon as this answers (TOKEN_ROTATE)."""
    row, _ = await _writable_trigger(call)
    _webhook_only(row)
    _, token = await editing.rotate_token(call.conn, call.ctx.keyring, row["id"], call.principal.member_id)
    return TokenOut(token=token, url=_url(call, token))


@api.add("PUT", "/v1/triggers/{trigger_id}/signing-secret", summary="Set the signing secret", response=SecretOut,
         body=SecretIn)
async def set_signing_secret(call: Call) -> SecretOut:
    """Writers only. Write-only: the answer is the last four characters (SECRET_SET)."""
    body: SecretIn = call.body
    row, _ = await _writable_trigger(call)
    _webhook_only(row)
    secret = _secret_for(schemes.preset_scheme(row["provider"], row["signature_scheme"]), body)
    await editing.change_signing_secret(call.conn, call.ctx.keyring, row, secret, body.grace_seconds,
                                        call.principal.member_id)
    return SecretOut(hint=secret[-4:])


def _secret_for(scheme: dict[str, Any] | None, body: SecretIn) -> str:
    """What the trigger stores: the secret, or a public key validated for its scheme's algorithm."""
    algorithm = scheme.get("algorithm") if scheme and scheme.get("kind") == "public_key" else None
    if algorithm is None:
        if body.secret is None:
            raise ApiError(422, "invalid_request", "public_key: this trigger's scheme is not public_key; send secret")
        return body.secret
    if body.public_key is None:
        raise ApiError(422, "invalid_request", "secret: this trigger checks a public key; send public_key")
    try:
        return schemes.public_key_text(body.public_key, algorithm)
    except schemes.SchemeError as exc:
        raise ApiError(422, "invalid_request", f"public_key: {exc}") from None


@api.add("DELETE", "/v1/triggers/{trigger_id}/signing-secret", summary="Remove the signing secret",
         response=SecretOut)
async def remove_signing_secret(call: Call) -> SecretOut:
    """Writers only. The trigger goes back to bearer-only mode (its URL is the only credential)."""
    row, _ = await _writable_trigger(call)
    _webhook_only(row)
    await editing.change_signing_secret(call.conn, call.ctx.keyring, row, None, 0, call.principal.member_id)
    return SecretOut(hint=None)


@api.add("GET", "/v1/triggers/{trigger_id}/preview", summary="Preview a schedule", response=PreviewOut,
         query=PreviewQuery)
async def preview_trigger(call: Call) -> PreviewOut:
    """The next ``count`` fire times after the database's now, by the same code the scheduler uses."""
    q: PreviewQuery = call.query
    row, _ = await _trigger(call)
    if row["kind"] != "schedule":
        raise ApiError(409, "not_a_schedule_trigger", "only schedule triggers have a preview")
    schedule = _schedule(row["cron"], row["timezone"])
    pairs = schedule.preview(q.count, await _db_now(call.conn))
    return PreviewOut(timezone=row["timezone"], occurrences=[
        Occurrence(utc=utc.astimezone(UTC).isoformat().replace("+00:00", "Z"), local=local.isoformat())
        for utc, local in pairs])
