"""Signature schemes as data: how a `custom` webhook trigger checks its sender (docs/PROVIDERS.md, "Custom").

Four families, each a JSON object on the trigger (`signature`), validated when it is saved:

- `hmac`: an HMAC (SHA-1/256/512) of a template over the request, sent hex or base64 in a header, maybe
  after a prefix (`sha256=`), maybe as one part of a structured header (Stripe's `t=…,v1=…`, Paddle's
  `ts=…;h1=…`), maybe with a timestamp (its own header, a part of that header, or a JSON pointer into the
  body) that must be within `tolerance_s` of the database clock. Several signatures may be sent (repeated
  parts, or a space-separated list); any may match. The key is the trigger's secret as UTF-8, or for
  `secret_encoding: base64` what follows an optional `whsec_` decoded (Standard Webhooks' keys).
- `public_key`: Ed25519, ECDSA P-256/SHA-256 or RSA PKCS#1 v1.5/SHA-256 over the same templates, checked
  with the sender's public key, which the trigger stores in place of a secret (`load_public_key`).
- `shared_secret`: the secret itself in a header (after an optional prefix such as `Bearer `) or a query
  parameter; `basic_auth`: HTTP Basic credentials equal to the secret `user:password`.

Templates hold literal text and `{body}` (the raw bytes), `{timestamp}`, `{url}` (the public URL called,
each spelling Twilio may sign), `{header:NAME}` and `{twilio_form}` (Twilio's URL + sorted form params, or
the URL alone once a JSON body matches its `bodySHA256`). A check returns the statuses presets return:
freshness is judged only after a signature matched, so a forger only ever earns `invalid`; every
comparison is constant time.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from gateway import providers
from gateway.providers import Inbound, SignatureStatus
from hookgate import signing
from hookgate.preset_data import PRESET_DATA

__all__ = ["Scheme", "SchemeError", "as_preset", "data_preset", "get_preset", "load_public_key", "parse_scheme",
           "preset_names", "preset_scheme", "public_key_text"]

HeaderName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")]
"""An HTTP header's name (an RFC 9110 token); matched case-insensitively."""
Part = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9_-]+$")]
Pointer = Annotated[str, Field(max_length=200, pattern=r"^(/[^/]*)*$")]
"""A JSON pointer (RFC 6901): `/a/0/b`."""

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_NAMED = {"body", "timestamp", "url", "twilio_form"}
_HEADER_NAME = re.compile(r"^header:[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
_STAMP = re.compile(r"[0-9]{1,13}")
_ITEMS = re.compile(r"[,;]")


class SchemeError(ValueError):
    """A scheme or a public key that cannot be used; the message says which part and why."""


def _template(text: str) -> str:
    """Refuse a template naming anything but the known placeholders, or holding a stray brace."""
    names = _PLACEHOLDER.findall(text)
    for name in names:
        if name not in _NAMED and not _HEADER_NAME.match(name):
            raise ValueError(f"unknown placeholder {{{name}}}; use {{body}}, {{timestamp}}, {{url}}, "
                             "{twilio_form} or {header:NAME}")
    if "{" in _PLACEHOLDER.sub("", text) or "}" in _PLACEHOLDER.sub("", text):
        raise ValueError("a brace outside a placeholder")
    return text


class _Signed(BaseModel):
    """What the HMAC and public-key families share: where the signature and its timestamp are, what is signed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    header: HeaderName
    encoding: Literal["hex", "base64"] = "hex"
    prefix: str = Field("", max_length=32)
    signed: Annotated[str, Field(min_length=1, max_length=500)] = "{body}"
    signature_part: Part | None = None
    """In a structured header (`t=…,v1=…`), the name of the parts that hold signatures."""
    timestamp_header: HeaderName | None = None
    timestamp_part: Part | None = None
    timestamp_json: Pointer | None = None
    timestamp_unit: Literal["s", "ms"] = "s"
    tolerance_s: int = Field(300, ge=1, le=86_400)

    _signed = field_validator("signed")(_template)

    @model_validator(mode="after")
    def _timestamp_is_one_place(self) -> _Signed:
        where = [w for w in (self.timestamp_header, self.timestamp_part, self.timestamp_json) if w is not None]
        if len(where) > 1:
            raise ValueError("give the timestamp one place: timestamp_header, timestamp_part or timestamp_json")
        if self.timestamp_part is not None and self.signature_part is None:
            raise ValueError("timestamp_part needs signature_part (both are parts of one structured header)")
        if "{timestamp}" in self.signed and not where:
            raise ValueError("the template signs {timestamp} but no timestamp_header, _part or _json says where")
        return self

    def check(self, req: Inbound, secret: str) -> SignatureStatus:
        """`valid`, `missing`, `invalid` or `expired` for one secret (or public key)."""
        value = req.header(self.header.lower())
        if value is None or any(req.header(name.lower()) is None for name in self.signed_headers()):
            return "missing"
        candidates, stamp = self._read(value, req)
        if stamp is None:
            return "missing"
        if not candidates or (stamp == "" and "{timestamp}" in self.signed):
            return "invalid"
        messages = _render(self.signed, req, stamp)
        if not messages or not any(self._matches(secret, m, c) for m in messages for c in candidates):
            return "invalid"
        return self._fresh(req, stamp)

    def signed_headers(self) -> list[str]:
        """The headers the template signs (`{header:NAME}`), besides the signature's own."""
        names = _PLACEHOLDER.findall(self.signed)
        return [name.removeprefix("header:") for name in names if name.startswith("header:")]

    def _read(self, value: str, req: Inbound) -> tuple[list[bytes], str | None]:
        """The decoded signatures sent and the timestamp's text ("": none or unusable; None: header missing)."""
        if self.signature_part is not None:
            parts = [(k.strip(), v.strip()) for k, _, v in (item.partition("=") for item in _ITEMS.split(value))]
            sent = [v for k, v in parts if k == self.signature_part]
            stamps = [v for k, v in parts if k == self.timestamp_part]
            stamp = "" if self.timestamp_part is None else stamps[0] if len(stamps) == 1 else "?"
        else:
            sent, stamp = value.split(), ""
            if self.timestamp_header is not None:
                found = req.header(self.timestamp_header.lower())
                if found is None:
                    return [], None
                stamp = found
            elif self.timestamp_json is not None:
                number = providers.json_pointer(req.body, self.timestamp_json)
                usable = isinstance(number, int | float) and not isinstance(number, bool) and math.isfinite(number)
                stamp = str(int(number)) if usable and isinstance(number, int | float) else ""
        if stamp and not _STAMP.fullmatch(stamp):
            return [], "?"
        return [d for s in sent if s.startswith(self.prefix) and (d := self._decode(s[len(self.prefix):]))], stamp

    def _decode(self, text: str) -> bytes | None:
        try:
            return bytes.fromhex(text) if self.encoding == "hex" else base64.b64decode(text, validate=True)
        except (ValueError, binascii.Error):
            return None

    def _fresh(self, req: Inbound, stamp: str) -> SignatureStatus:
        if self.timestamp_header is None and self.timestamp_part is None and self.timestamp_json is None:
            return "valid"
        if not stamp:
            return "expired"  # genuine, but with no usable timestamp its freshness cannot be shown
        seconds = int(stamp) / (1000 if self.timestamp_unit == "ms" else 1)
        return "valid" if abs(req.now - seconds) <= self.tolerance_s else "expired"

    def _matches(self, secret: str, message: bytes, signature: bytes) -> bool:
        raise NotImplementedError

    def explain(self, req: Inbound, secrets: Sequence[str]) -> str:
        """Which part of the scheme failed, in words: for the delivery's page, never for the sender."""
        value = req.header(self.header.lower())
        wanted = [self.header, *self.signed_headers(), *([self.timestamp_header] if self.timestamp_header else [])]
        missing = [name for name in wanted if req.header(name.lower()) is None]
        if value is None or missing:
            return f"header {missing[0]} is missing"
        candidates, stamp = self._read(value, req)
        if stamp == "?":
            return f"the timestamp in {self._stamp_place()} is missing, repeated or not a whole number"
        if not candidates:
            form = f"{self.signature_part}={self.prefix}<{self.encoding}>" if self.signature_part else \
                f"{self.prefix}<{self.encoding}>"
            return f"header {self.header} holds no signature of the form {form}"
        expired = any(self.check(req, secret) == "expired" for secret in secrets)
        if not stamp and ("{timestamp}" in self.signed or expired):
            return f"the timestamp in {self._stamp_place()} is missing or not a whole number"
        if stamp and expired:
            age = req.now - int(stamp) / (1000 if self.timestamp_unit == "ms" else 1)
            when = f"{age:,.0f} s old" if age >= 0 else f"{-age:,.0f} s in the future"
            return f"timestamp {when}, tolerance {self.tolerance_s} s"
        return self._mismatch(secrets)

    def _stamp_place(self) -> str:
        if self.timestamp_part is not None:
            return f"part {self.timestamp_part} of header {self.header}"
        return f"header {self.timestamp_header}" if self.timestamp_header else f"the body's {self.timestamp_json}"

    def _mismatch(self, secrets: Sequence[str]) -> str:
        raise NotImplementedError


class HmacScheme(_Signed):
    """An HMAC of the template, keyed by the trigger's secret."""

    kind: Literal["hmac"] = "hmac"
    algorithm: Literal["sha1", "sha256", "sha512"] = "sha256"
    secret_encoding: Literal["utf8", "base64"] = "utf8"

    def _matches(self, secret: str, message: bytes, signature: bytes) -> bool:
        key = signing.standard_key(secret) if self.secret_encoding == "base64" else signing.utf8(secret)
        return hmac.compare_digest(hmac.digest(key, message, self.algorithm), signature)

    def _mismatch(self, secrets: Sequence[str]) -> str:
        return (f"the HMAC-{self.algorithm.upper()} of {self.signed} in header {self.header} does not match the "
                f"one made with the secret {_ending(secrets)}")


class PublicKeyScheme(_Signed):
    """A signature by the sender's private key, checked with the public key stored on the trigger."""

    kind: Literal["public_key"]
    algorithm: Literal["ed25519", "ecdsa_p256_sha256", "rsa_pkcs1_sha256"]
    encoding: Literal["hex", "base64"] = "base64"

    def _matches(self, secret: str, message: bytes, signature: bytes) -> bool:
        try:
            _VERIFY[self.algorithm](load_public_key(secret, self.algorithm), signature, message)
        except (InvalidSignature, SchemeError, ValueError):
            return False
        return True

    def _mismatch(self, secrets: Sequence[str]) -> str:
        return (f"the {_ALGORITHM_NAMES[self.algorithm]} signature of {self.signed} in header {self.header} does "
                f"not verify with the key {_ending(secrets)}")


class SharedSecretScheme(BaseModel):
    """The secret itself, in a header (after `prefix`) or a query parameter."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["shared_secret"]
    header: HeaderName | None = None
    prefix: str = Field("", max_length=32)
    query: Annotated[str, Field(min_length=1, max_length=100)] | None = None

    @model_validator(mode="after")
    def _one_place(self) -> SharedSecretScheme:
        if (self.header is None) == (self.query is None):
            raise ValueError("give exactly one of header and query")
        if self.query is not None and self.prefix:
            raise ValueError("prefix applies to a header only")
        return self

    def check(self, req: Inbound, secret: str) -> SignatureStatus:
        """`valid` when the sent value equals the secret (constant time), else `missing` or `invalid`."""
        if self.header is not None:
            sent = req.header(self.header.lower())
            # HTTP drops a header value's surrounding spaces, so a secret's own are not compared either.
            expected = self.prefix + secret.strip(" ")
        else:
            sent, expected = providers.query_param(req.url, self.query or ""), secret
        if not sent:
            return "missing"
        return "valid" if hmac.compare_digest(signing.utf8(sent), signing.utf8(expected)) else "invalid"

    def explain(self, req: Inbound, secrets: Sequence[str]) -> str:
        """Which part failed, in words (the delivery's page)."""
        where = f"header {self.header}" if self.header is not None else f"query parameter {self.query}"
        if self.check(req, secrets[0] if secrets else "") == "missing":
            return f"{where} is missing"
        after = f" after {self.prefix!r}" if self.prefix else ""
        return f"{where} does not hold{after} the secret {_ending(secrets)}"


class BasicAuthScheme(BaseModel):
    """HTTP Basic credentials (`Authorization: Basic base64(user:password)`) equal to the secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["basic_auth"]

    def check(self, req: Inbound, secret: str) -> SignatureStatus:
        """`valid` when the credentials decode to the secret `user:password` (constant time)."""
        value = req.header("authorization")
        if value is None:
            return "missing"
        scheme, _, token = value.partition(" ")
        try:
            sent = base64.b64decode(token.strip(), validate=True) if scheme.lower() == "basic" else b""
        except (ValueError, binascii.Error):
            sent = b""
        return "valid" if hmac.compare_digest(sent, signing.utf8(secret)) else "invalid"

    def explain(self, req: Inbound, secrets: Sequence[str]) -> str:
        """Which part failed, in words (the delivery's page)."""
        if req.header("authorization") is None:
            return "header Authorization is missing"
        return f"the Basic credentials in header Authorization are not the user:password {_ending(secrets)}"


Scheme = Annotated[HmacScheme | PublicKeyScheme | SharedSecretScheme | BasicAuthScheme, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Scheme)


_ALGORITHM_NAMES = {"ed25519": "Ed25519", "ecdsa_p256_sha256": "ECDSA P-256/SHA-256",
                    "rsa_pkcs1_sha256": "RSA PKCS#1 v1.5/SHA-256"}


def _ending(secrets: Sequence[str]) -> str:
    """`ending …abcd` (or `…abcd or …wxyz` during a rotation): the hint the API shows, never more."""
    return "ending " + " or ".join(f"…{secret[-4:]}" for secret in secrets if secret)


def default_kind(data: Any) -> Any:
    """A request body whose `signature` names no `kind` gets `hmac`, the default family."""
    scheme = data.get("signature") if isinstance(data, dict) else None
    if isinstance(scheme, dict) and "kind" not in scheme:
        return {**data, "signature": {"kind": "hmac", **scheme}}
    return data


def parse_scheme(data: object) -> HmacScheme | PublicKeyScheme | SharedSecretScheme | BasicAuthScheme:
    """A validated scheme from its JSON object (`kind` defaults to `hmac`); pydantic's ValidationError if not."""
    return _ADAPTER.validate_python(default_kind({"signature": data})["signature"])  # type: ignore[no-any-return]


# -- templates ----------------------------------------------------------------------------------------


def _render(template: str, req: Inbound, stamp: str) -> list[bytes]:
    """Every message the template may stand for (one per spelling of the URL); [] if it cannot be made."""
    pieces: list[list[bytes]] = []
    position = 0
    for match in _PLACEHOLDER.finditer(template):
        pieces.append([signing.utf8(template[position:match.start()])])
        value = _value(match.group(1), req, stamp)
        if value is None:
            return []
        pieces.append(value)
        position = match.end()
    pieces.append([signing.utf8(template[position:])])
    messages = [b""]
    for choices in pieces:
        messages = [m + c for m in messages for c in choices]
    return messages


def _value(name: str, req: Inbound, stamp: str) -> list[bytes] | None:
    if name == "body":
        return [req.raw]
    if name == "timestamp":
        return [stamp.encode()]
    if name == "url":
        return [signing.utf8(url) for url in providers.twilio_urls(req.url)]
    if name == "twilio_form":
        params = providers.twilio_signed_part(req)
        return None if params is None else [signing.utf8(url + params) for url in providers.twilio_urls(req.url)]
    header = req.header(name.removeprefix("header:").lower())
    return None if header is None else [signing.utf8(header)]


# -- public keys --------------------------------------------------------------------------------------


_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "ed25519": (ed25519.Ed25519PublicKey,),
    "ecdsa_p256_sha256": (ec.EllipticCurvePublicKey,),
    "rsa_pkcs1_sha256": (rsa.RSAPublicKey,),
}


def _verify_ed25519(key: Any, signature: bytes, message: bytes) -> None:
    key.verify(signature, message)


def _verify_ecdsa(key: Any, signature: bytes, message: bytes) -> None:
    if len(signature) == 64:  # raw r || s, as JOSE and some SDKs send it, rather than DER
        signature = encode_dss_signature(int.from_bytes(signature[:32]), int.from_bytes(signature[32:]))
    key.verify(signature, message, ec.ECDSA(hashes.SHA256()))


def _verify_rsa(key: Any, signature: bytes, message: bytes) -> None:
    key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())


_VERIFY: dict[str, Callable[[Any, bytes, bytes], None]] = {
    "ed25519": _verify_ed25519, "ecdsa_p256_sha256": _verify_ecdsa, "rsa_pkcs1_sha256": _verify_rsa,
}


@functools.lru_cache(maxsize=1024)
def load_public_key(text: str, algorithm: str) -> Any:
    """The public key in `text` (hex of a raw key, base64 of DER, or PEM) for `algorithm`; SchemeError if not."""
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key: Any = serialization.load_pem_public_key(text.encode())
        elif re.fullmatch(r"[0-9a-fA-F]+", text) and len(text) % 2 == 0:
            key = _raw_key(bytes.fromhex(text), algorithm)
        else:
            key = serialization.load_der_public_key(base64.b64decode("".join(text.split()), validate=True))
    except (ValueError, binascii.Error, UnsupportedAlgorithm) as exc:
        raise SchemeError(f"not a public key in hex, base64 DER or PEM ({exc})") from None
    if not isinstance(key, _KEY_TYPES[algorithm]):
        raise SchemeError(f"the key is not an {algorithm} public key")
    if isinstance(key, ec.EllipticCurvePublicKey) and not isinstance(key.curve, ec.SECP256R1):
        raise SchemeError(f"the key is on {key.curve.name}, not P-256")
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < 2048:
        raise SchemeError(f"an RSA key of {key.key_size} bits is too weak (at least 2048)")
    return key


def _raw_key(raw: bytes, algorithm: str) -> Any:
    if algorithm == "ed25519":
        return ed25519.Ed25519PublicKey.from_public_bytes(raw)
    if algorithm == "ecdsa_p256_sha256":
        return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
    raise SchemeError("an RSA key is given as base64 DER or PEM, not hex")


def public_key_text(text: str, algorithm: str) -> str:
    """The key as stored: base64 of its DER SubjectPublicKeyInfo, one line (its last 4 are its hint)."""
    der = load_public_key(text, algorithm).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode()


# -- a trigger's scheme as the preset ingress uses ----------------------------------------------------


def as_preset(scheme: HmacScheme | PublicKeyScheme | SharedSecretScheme | BasicAuthScheme) -> providers.Preset:
    """The `custom` preset of one scheme: `generic`'s event names and dedupe keys, this signature check."""
    generic = providers.PRESETS["generic"]
    if isinstance(scheme, BasicAuthScheme):
        secret_headers = {"authorization"}
    elif isinstance(scheme, SharedSecretScheme):
        secret_headers = {scheme.header.lower()} if scheme.header else set()
    else:
        secret_headers = {scheme.header.lower()}
    return providers.Preset(
        name="custom", check=scheme.check, explain=scheme.explain, namer=generic.namer,
        dedupe_sources=generic.dedupe_sources,
        signature_headers=frozenset(secret_headers), stored_headers=generic.stored_headers,
        event_headers=generic.event_headers,
    )


def data_preset(name: str, data: Mapping[str, Any]) -> providers.Preset:
    """The preset of a configuration (hookgate/preset_data.py): its scheme, event and dedupe sources."""
    signature = parse_scheme(data["signature"])
    preset = replace(as_preset(signature), name=name, dedupe_sources=())
    if (event := data.get("event_source")) is not None:
        preset = replace(preset, namer=providers.source_namer(event), event_headers=frozenset())
    if (dedupe := data.get("dedupe_key_source")) is not None:
        preset = replace(preset, dedupe_sources=(dedupe,))
    stamp = getattr(signature, "timestamp_header", None)
    return replace(preset, stored_headers=frozenset({stamp.lower()} if stamp else ()))


_DATA_PRESETS: Mapping[str, providers.Preset] = {name: data_preset(name, d) for name, d in PRESET_DATA.items()}


def preset_names() -> list[str]:
    """Every preset a trigger's `provider` may name (besides `custom`), code and data alike, sorted."""
    return sorted([*providers.PRESETS, *_DATA_PRESETS])


def get_preset(name: str) -> providers.Preset:
    """The preset called `name`, code or data; ValueError for a name that is neither."""
    if name in _DATA_PRESETS:
        return _DATA_PRESETS[name]
    if name in providers.PRESETS:
        return providers.PRESETS[name]
    raise ValueError(f"unknown provider preset {name!r}; expected one of {preset_names()}")


def preset_scheme(provider: str, stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """The scheme a trigger is checked by as data: its own, else its data preset's; None for a code preset's."""
    if stored is not None:
        return stored
    data = PRESET_DATA.get(provider)
    return None if data is None else dict(data["signature"])
