"""Provider presets: event name, dedupe key and signature check per provider (docs/PROVIDERS.md).

Pure functions over an `Inbound` request; no I/O. `verify` never raises and returns one of
`not_required` (no secret configured: bearer-only mode), `missing` (a header the scheme needs is absent
or blank), `invalid` (malformed, or no signature matches any secret), `expired` (a signature matches but
its timestamp is outside the tolerance) or `valid`. Freshness is judged only after a signature matched,
so `expired` always means "genuine but stale" and a forger can only ever earn `invalid`.

HMACs run over the raw bytes; comparisons are constant time; several signatures in one header and
several secrets (the current one and, during a rotation grace window, the previous one) may each match.

Event names: `<provider>.<part>[.<part>]`. Each part is lower-cased, `/` becomes `.`, runs of
whitespace become `_`, control characters are dropped, and it is capped at 100 characters. So GitHub
`pull_request` + action `opened` -> `github.pull_request.opened`, GitLab `Merge Request Hook` ->
`gitlab.merge_request_hook`, Shopify `orders/create` -> `shopify.orders.create`, Linear `Issue` +
`create` -> `linear.issue.create`. `generic` and `standard` keep the sender's own names unprefixed
(`order.paid`). Beyond the table: a Slack slash command is `slack.slash_command`; Twilio names come from
`EventType`, `type`, `MessageStatus`/`SmsStatus` (`twilio.message.delivered`) or `CallStatus`
(`twilio.call.completed`). A request that names no event gets `webhook.received`.

Dedupe keys come from the preset's sources in order (`header:<name>` or `body:<field>`); a key longer
than 200 characters is replaced by `sha256:<hex>` so it always fits the dedupe keys' primary key.

Per-scheme choices: Standard Webhooks keys its HMAC exactly as the reference library does (base64 of what
follows an optional `whsec_`; a secret that is not base64 is used as raw bytes), Stripe with the whole
`whsec_…` string, GitLab with the token stripped of surrounding spaces (HTTP drops them from the header
that carries it); any printable secret works with every scheme. A Linear body that verifies but has no
numeric `webhookTimestamp` is `expired`. Twilio form bodies are signed as URL + sorted params; any other
body must match the URL's `bodySHA256`, and the signature then covers the URL alone;
`X-Twilio-Webhooks-Signature-Settings` may select HMAC-SHA256.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Literal
from urllib.parse import parse_qs, urlsplit, urlunsplit

from gateway.envelope import InvalidBody, Payload, form_fields, media_type
from hookgate.signing import mac as _mac
from hookgate.signing import standard_key, twilio_params, utf8

__all__ = [
    "DEFAULT_EVENT",
    "PRESETS",
    "Inbound",
    "Preset",
    "SignatureStatus",
    "get_preset",
    "selected_headers",
    "slack_challenge",
]

SignatureStatus = Literal["not_required", "valid", "invalid", "missing", "expired"]

DEFAULT_EVENT = "webhook.received"
TOLERANCE_S = 300
"""Stripe, Slack and Standard Webhooks: a timestamp may be this far in the past or the future."""
LINEAR_TOLERANCE_MS = 60_000
"""Linear: body `webhookTimestamp` (milliseconds) within a minute of now, both ways."""

_MAX_SEGMENT = 100
_MAX_KEY = 200
_MAX_HEADER = 1024
_COMMON_HEADERS = frozenset({"content-type", "user-agent"})
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Inbound:
    """What the ingress hands a preset: the exact bytes received, lower-cased headers, the parsed body."""

    raw: bytes
    headers: Mapping[str, str]
    body: Payload
    url: str
    """The public URL the provider called, query string included (Twilio signs it)."""
    now: float
    """Unix seconds; injected so tests can move time."""

    def header(self, name: str) -> str | None:
        """A header's value with surrounding whitespace removed; None if absent or blank."""
        value = self.headers.get(name, "").strip()
        return value or None

    def field(self, *path: str) -> object:
        """A value inside a JSON-object body (`field("event", "type")`); None if any step is missing."""
        node: object = self.body
        for key in path:
            if not isinstance(node, dict):
                return None
            node = node.get(key)
        return node


Check = Callable[[Inbound, str], SignatureStatus]
"""A signature scheme checked against one secret."""


@dataclass(frozen=True)
class Preset:
    """How one provider names events, dedupes and signs; build one per preset of docs/PROVIDERS.md."""

    name: str
    check: Check
    namer: Callable[[Inbound], str | None]
    dedupe_sources: tuple[str, ...]
    signature_headers: frozenset[str]
    """Headers whose values are never stored; `selected_headers` records them as present: True."""
    stored_headers: frozenset[str] = frozenset()
    """Provider headers worth keeping on a delivery, besides content-type, user-agent and dedupe headers."""
    event_headers: frozenset[str] = frozenset()
    """Headers `namer` reads the event name from (documented in /openapi.json)."""
    explain: Callable[[Inbound, Sequence[str]], str] | None = None
    """Which part of the check failed, in words, for a rejected delivery's page (schemes given as data)."""

    def event(self, req: Inbound) -> str:
        """The normalised event name (see module docstring); `webhook.received` if none is given."""
        return self.namer(req) or DEFAULT_EVENT

    def dedupe_key(self, req: Inbound) -> tuple[str | None, str | None]:
        """`(key, source)` from the first source that is present, e.g. `("evt_1", "body:id")`."""
        for source in self.dedupe_sources:
            value = source_value(req, source)
            if value:
                return _bounded(value), source
        return None, None

    @cached_property
    def kept_headers(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The headers `selected_headers` stores by value and as True, in order: worked out once per preset."""
        dedupe = {
            source.removeprefix("header:") for source in self.dedupe_sources if source.startswith("header:")
        }
        keep = sorted((_COMMON_HEADERS | self.stored_headers | dedupe) - self.signature_headers)
        return tuple(keep), tuple(sorted(self.signature_headers))

    def verify(self, req: Inbound, secrets: Sequence[str]) -> SignatureStatus:
        """Check the signature against each secret; no (non-empty) secret means `not_required`."""
        results = [self.check(req, secret) for secret in secrets if secret]
        if not results:
            return "not_required"
        for outcome in ("valid", "expired"):
            if outcome in results:
                return outcome
        return results[0]


def get_preset(name: str) -> Preset:
    """The preset called `name`; ValueError for a name that is not one of `PRESETS`."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown provider preset {name!r}; expected one of {sorted(PRESETS)}") from None


def slack_challenge(req: Inbound) -> str | None:
    """The `challenge` of a Slack `url_verification` request, else None; ask only once it verified."""
    challenge = req.field("challenge")
    if req.field("type") == "url_verification" and isinstance(challenge, str) and challenge:
        return challenge
    return None


def selected_headers(preset: Preset, headers: Mapping[str, str]) -> dict[str, str | bool]:
    """The headers to store on a delivery: an allow-list, with signature headers reduced to True."""
    keep, signed = preset.kept_headers
    selected: dict[str, str | bool] = {name: headers[name][:_MAX_HEADER] for name in keep if name in headers}
    selected.update((name, True) for name in signed if name in headers)
    return selected


# -- signature schemes, each against one secret -------------------------------------------------------


def _check_hub_sha256(req: Inbound, secret: str) -> SignatureStatus:
    signature = req.header("x-hub-signature-256")
    if signature is None:
        return "missing"
    scheme, _, digest = signature.partition("=")
    if scheme != "sha256":
        return "invalid"
    return _valid_if(_hex_equal(_mac(secret, req.raw), digest))


def _check_gitlab(req: Inbound, secret: str) -> SignatureStatus:
    token = req.header("x-gitlab-token")
    if token is None:
        return "missing"
    # The token travels as a header value, and HTTP drops a value's surrounding spaces.
    return _valid_if(hmac.compare_digest(utf8(token), utf8(secret.strip(" "))))


def _check_stripe(req: Inbound, secret: str) -> SignatureStatus:
    header = req.header("stripe-signature")
    if header is None:
        return "missing"
    items = (item.partition("=") for item in header.split(","))
    pairs = [(key.strip(), value.strip()) for key, _, value in items]
    stamps = [value for key, value in pairs if key == "t"]
    signatures = [value for key, value in pairs if key == "v1"]
    if len(stamps) != 1 or not signatures or not _TIMESTAMP.fullmatch(stamps[0]):
        return "invalid"
    stamp = int(stamps[0])
    expected = _mac(secret, f"{stamp}.".encode() + req.raw)
    if not any(_hex_equal(expected, candidate) for candidate in signatures):
        return "invalid"
    return _fresh(req.now, stamp)


def _check_slack(req: Inbound, secret: str) -> SignatureStatus:
    signature, stamp = req.header("x-slack-signature"), req.header("x-slack-request-timestamp")
    if signature is None or stamp is None:
        return "missing"
    version, _, digest = signature.partition("=")
    if version != "v0" or not _TIMESTAMP.fullmatch(stamp):
        return "invalid"
    if not _hex_equal(_mac(secret, f"v0:{stamp}:".encode() + req.raw), digest):
        return "invalid"
    return _fresh(req.now, int(stamp))


def _check_shopify(req: Inbound, secret: str) -> SignatureStatus:
    signature = req.header("x-shopify-hmac-sha256")
    if signature is None:
        return "missing"
    return _valid_if(_b64_equal(_mac(secret, req.raw), signature))


def _check_standard(req: Inbound, secret: str) -> SignatureStatus:
    msg_id = req.header("webhook-id") or req.header("svix-id")
    stamp = req.header("webhook-timestamp") or req.header("svix-timestamp")
    header = req.header("webhook-signature") or req.header("svix-signature")
    if msg_id is None or stamp is None or header is None:
        return "missing"
    if not _TIMESTAMP.fullmatch(stamp):
        return "invalid"
    expected = _mac(standard_key(secret), utf8(f"{msg_id}.{stamp}.") + req.raw)
    entries = (entry.partition(",") for entry in header.split())
    if not any(version == "v1" and _b64_equal(expected, sig) for version, _, sig in entries):
        return "invalid"
    return _fresh(req.now, int(stamp))


def _check_linear(req: Inbound, secret: str) -> SignatureStatus:
    signature = req.header("linear-signature")
    if signature is None:
        return "missing"
    if not _hex_equal(_mac(secret, req.raw), signature):
        return "invalid"
    sent_ms = req.field("webhookTimestamp")
    if isinstance(sent_ms, bool) or not isinstance(sent_ms, int | float) or not math.isfinite(sent_ms):
        return "expired"  # genuine, but with no usable timestamp its freshness cannot be shown
    return _valid_if(abs(req.now * 1000 - sent_ms) <= LINEAR_TOLERANCE_MS, otherwise="expired")


def _check_twilio(req: Inbound, secret: str) -> SignatureStatus:
    signature = req.header("x-twilio-signature")
    if signature is None:
        return "missing"
    digestmod = _twilio_digest(req.header("x-twilio-webhooks-signature-settings"))
    signed_params = twilio_signed_part(req)
    if digestmod is None or signed_params is None:
        return "invalid"
    key = utf8(secret)
    return _valid_if(
        any(
            _b64_equal(hmac.digest(key, utf8(url + signed_params), digestmod), signature)
            for url in twilio_urls(req.url)
        )
    )


def _twilio_digest(settings: str | None) -> str | None:
    """HMAC-SHA1 by default; a Webhook Setting may name HMAC_SHA256 in its settings header."""
    algorithm = "HMAC_SHA1"
    for part in (settings or "").split(","):
        name, sep, value = part.partition("=")
        if sep and name.strip() == "algorithm" and value.strip():
            algorithm = value.strip().upper()
    return {"HMAC_SHA1": "sha1", "HMAC_SHA256": "sha256"}.get(algorithm)


def twilio_signed_part(req: Inbound) -> str | None:
    """What Twilio appends to the URL: the sorted form params, or "" once a JSON body matches `bodySHA256`."""
    if media_type(req.headers.get("content-type")) == "application/x-www-form-urlencoded":
        fields = _raw_form(req.raw)
        return None if fields is None else twilio_params(fields)
    claimed = query_param(req.url, "bodySHA256")
    actual = hashlib.sha256(req.raw).hexdigest()
    return "" if claimed is not None and hmac.compare_digest(utf8(claimed), actual.encode()) else None


def query_param(url: str, name: str) -> str | None:
    """The first value of the query parameter `name` in `url`, or None."""
    try:
        found = parse_qs(urlsplit(url).query).get(name)
    except ValueError:
        return None
    return found[0] if found else None


def _raw_form(raw: bytes) -> list[tuple[str, str]] | None:
    try:
        return form_fields(raw.removeprefix(_BOM).decode("utf-8"))
    except (UnicodeDecodeError, InvalidBody):
        return None


def twilio_urls(url: str) -> tuple[str, ...]:
    """The URL as given, without its port, and with it (the scheme's default if none): Twilio signs either."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return (url,)
    bare = parts.netloc.rsplit(":", 1)[0] if port is not None else parts.netloc
    with_port = f"{bare}:{port or (443 if parts.scheme == 'https' else 80)}"
    variants = (url, urlunsplit(parts._replace(netloc=bare)), urlunsplit(parts._replace(netloc=with_port)))
    return tuple(dict.fromkeys(variants))


# -- event names --------------------------------------------------------------------------------------


def _segment(value: object) -> str | None:
    """One normalised part of an event name, or None if `value` is not a usable string."""
    if not isinstance(value, str):
        return None
    text = "_".join(value.lower().replace("/", ".").split())
    if not text.isprintable():  # rare: a name is almost always printable, and this walks it char by char
        text = "".join(char for char in text if char.isprintable())
    return text[:_MAX_SEGMENT] or None


def named(prefix: str, head: object, tail: object = None) -> str | None:
    """`prefix.head[.tail]`, normalised, or None when `head` is unusable; an empty prefix adds nothing."""
    first = _segment(head)
    if first is None:
        return None
    rest = _segment(tail)
    return ".".join(part for part in (prefix, first, rest) if part)


def source_namer(source: str) -> Callable[[Inbound], str | None]:
    """An event namer reading one source (a trigger's `event_source`, a data preset's), normalised."""
    return lambda req: named("", source_value(req, source))


def _event_generic(req: Inbound) -> str | None:
    return named("", req.field("event")) or named("", req.header("x-event-type"))


def _event_github(req: Inbound) -> str | None:
    return named("github", req.header("x-github-event"), req.field("action"))


def _event_gitlab(req: Inbound) -> str | None:
    return named("gitlab", req.header("x-gitlab-event"))


def _event_stripe(req: Inbound) -> str | None:
    return named("stripe", req.field("type"))


def _event_slack(req: Inbound) -> str | None:
    event = named("slack", req.field("event", "type")) or named("slack", req.field("type"))
    if event is None and isinstance(req.field("command"), str):
        return "slack.slash_command"
    return event


def _event_shopify(req: Inbound) -> str | None:
    return named("shopify", req.header("x-shopify-topic"))


def _event_standard(req: Inbound) -> str | None:
    return named("", req.field("type"))


def _event_linear(req: Inbound) -> str | None:
    kind = req.header("linear-event") or req.field("type")
    return named("linear", kind, req.field("action"))


def _event_twilio(req: Inbound) -> str | None:
    return (
        named("twilio", req.field("EventType"))
        or named("twilio", req.field("type"))
        or named("twilio.message", req.field("MessageStatus"))
        or named("twilio.message", req.field("SmsStatus"))
        or named("twilio.call", req.field("CallStatus"))
    )


# -- small helpers ------------------------------------------------------------------------------------


def _hex_equal(expected: bytes, given: str) -> bool:
    try:
        return hmac.compare_digest(expected, bytes.fromhex(given))
    except ValueError:
        return False


def _b64_equal(expected: bytes, given: str) -> bool:
    try:
        return hmac.compare_digest(expected, base64.b64decode(given, validate=True))
    except ValueError:
        return False


def _valid_if(ok: bool, otherwise: SignatureStatus = "invalid") -> SignatureStatus:
    return "valid" if ok else otherwise


def _fresh(now: float, stamp: int) -> SignatureStatus:
    return _valid_if(abs(now - stamp) <= TOLERANCE_S, otherwise="expired")


SOURCE_PATTERN = r"^(header:[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}|json:(/[^/]*)+|form:[^\s]{1,100}|query:[^\s]{1,100})$"
"""A dedupe or event source a trigger may name: `header:NAME`, `json:/pointer`, `form:FIELD` or `query:NAME`."""


def source_value(req: Inbound, source: str) -> str | None:
    """The text a source names in a request, or None where it is absent, blank or not a string or integer.

    Besides the four a trigger may name, presets use `body:FIELD[,FIELD…]`: a top-level field of the body,
    with the values of the later fields that are present appended after `:` (Twilio's `MessageSid` with its
    status, so each status callback of one message is its own event).
    """
    kind, _, name = source.partition(":")
    if kind == "header":
        return req.header(name.lower())
    if kind == "query":
        return _scalar(query_param(req.url, name))
    if kind == "json":
        return _scalar(json_pointer(req.body, name))
    if kind == "form":
        is_form = media_type(req.headers.get("content-type")) == "application/x-www-form-urlencoded"
        return _scalar(req.field(name)) if is_form else None
    first, *more = (_scalar(req.field(field)) for field in name.split(","))
    return first and ":".join([first, *(value for value in more if value)])


def json_pointer(node: object, pointer: str) -> object:
    """The value at a JSON pointer (RFC 6901) in a parsed body, or None where any step is missing."""
    for token in pointer.split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(key)
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def _scalar(value: object) -> str | None:
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _bounded(key: str) -> str:
    if len(key) <= _MAX_KEY:
        return key
    return "sha256:" + hashlib.sha256(utf8(key)).hexdigest()


# -- the presets --------------------------------------------------------------------------------------

_HUB = frozenset({"x-hub-signature-256", "x-hub-signature"})

_PRESET_LIST: tuple[Preset, ...] = (
    Preset(
        name="generic",
        check=_check_hub_sha256,
        namer=_event_generic,
        dedupe_sources=("header:idempotency-key", "header:x-github-delivery"),
        signature_headers=_HUB,
        stored_headers=frozenset({"x-event-type"}),
        event_headers=frozenset({"x-event-type"}),
    ),
    Preset(
        name="github",
        check=_check_hub_sha256,
        namer=_event_github,
        dedupe_sources=("header:x-github-delivery",),
        signature_headers=_HUB,
        stored_headers=frozenset(
            {"x-github-event", "x-github-hook-id", "x-github-hook-installation-target-type"}
        ),
        event_headers=frozenset({"x-github-event"}),
    ),
    Preset(
        name="gitlab",
        check=_check_gitlab,
        namer=_event_gitlab,
        dedupe_sources=("header:x-gitlab-event-uuid", "header:idempotency-key"),
        signature_headers=frozenset({"x-gitlab-token"}),  # the secret itself
        stored_headers=frozenset({"x-gitlab-event", "x-gitlab-webhook-uuid", "x-gitlab-instance"}),
        event_headers=frozenset({"x-gitlab-event"}),
    ),
    Preset(
        name="stripe",
        check=_check_stripe,
        namer=_event_stripe,
        dedupe_sources=("body:id",),
        signature_headers=frozenset({"stripe-signature"}),
    ),
    Preset(
        name="slack",
        check=_check_slack,
        namer=_event_slack,
        dedupe_sources=("body:event_id",),
        signature_headers=frozenset({"x-slack-signature"}),
        stored_headers=frozenset({"x-slack-request-timestamp", "x-slack-retry-num", "x-slack-retry-reason"}),
    ),
    Preset(
        name="shopify",
        check=_check_shopify,
        namer=_event_shopify,
        dedupe_sources=("header:x-shopify-webhook-id",),
        signature_headers=frozenset({"x-shopify-hmac-sha256"}),
        stored_headers=frozenset({"x-shopify-topic", "x-shopify-event-id", "x-shopify-shop-domain"}),
        event_headers=frozenset({"x-shopify-topic"}),
    ),
    Preset(
        name="standard",
        check=_check_standard,
        namer=_event_standard,
        dedupe_sources=("header:webhook-id", "header:svix-id"),
        signature_headers=frozenset({"webhook-signature", "svix-signature"}),
        stored_headers=frozenset({"webhook-timestamp", "svix-timestamp"}),
    ),
    Preset(
        name="linear",
        check=_check_linear,
        namer=_event_linear,
        dedupe_sources=("header:linear-delivery",),
        signature_headers=frozenset({"linear-signature"}),
        stored_headers=frozenset({"linear-event"}),
        event_headers=frozenset({"linear-event"}),
    ),
    Preset(
        name="twilio",
        check=_check_twilio,
        namer=_event_twilio,
        # Without Twilio's idempotency header (older or relayed requests) its message or call id, with its status.
        dedupe_sources=("header:i-twilio-idempotency-token", "body:MessageSid,MessageStatus,SmsStatus",
                        "body:CallSid,CallStatus"),
        signature_headers=frozenset({"x-twilio-signature"}),
        stored_headers=frozenset({"x-twilio-webhooks-signature-settings"}),
    ),
)

PRESETS: Mapping[str, Preset] = MappingProxyType({preset.name: preset for preset in _PRESET_LIST})
"""Every preset by name; a trigger's `provider` is one of these keys (default `generic`)."""
