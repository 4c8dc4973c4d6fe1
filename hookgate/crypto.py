"""Secrets at rest and credentials: AES-256-GCM with key ids, token generation, digests.

Tokens (``awt_``, ``hgk_``, ``hgr_``) are 32 random bytes, so a plain SHA-256 digest is a safe lookup
key: there is nothing to brute-force. Secrets we must read back (signing secrets, a trigger's token for
its writers) are encrypted with the workspace-wide ``HOOKGATE_SECRET_KEY``, bound to their row by AAD.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hookgate import signing
from hookgate.errors import HookgateError
from hookgate.settings import ConfigError, decode_secret_key

_FORMAT = 1
_KEY_ID_LEN = 4
_NONCE_LEN = 12
TOKEN_BYTES = 32


class DecryptError(HookgateError):
    """A ciphertext that no configured key opens (wrong key, tampered, or bound to another row)."""


def key_id(key: bytes) -> bytes:
    """A short, non-secret fingerprint of a key, stored in front of each ciphertext."""
    return hashlib.sha256(b"hookgate-key-id\x00" + key).digest()[:_KEY_ID_LEN]


class Keyring:
    """Encrypts with the current key; decrypts with whichever configured key wrote the ciphertext."""

    def __init__(self, keys: list[bytes]) -> None:
        if not keys:
            raise ConfigError("HOOKGATE_SECRET_KEY is not set (required when HOOKGATE_DATABASE_URL is set)")
        self._current = keys[0]
        self._by_id = {key_id(k): AESGCM(k) for k in keys}
        self._current_id = key_id(self._current)

    def encrypt(self, plaintext: str, context: str) -> bytes:
        """Encrypt ``plaintext``; ``context`` (e.g. ``trigger:<id>:signing_secret``) must match on decrypt."""
        nonce = os.urandom(_NONCE_LEN)
        sealed = self._by_id[self._current_id].encrypt(nonce, plaintext.encode(), context.encode())
        return bytes([_FORMAT]) + self._current_id + nonce + sealed

    def derive(self, purpose: str) -> bytes:
        """A 32-byte key for one purpose (e.g. signing dashboard sessions), derived from the current key."""
        return hmac.new(self._current, b"hookgate-derive\x00" + purpose.encode(), hashlib.sha256).digest()

    def decrypt(self, blob: bytes, context: str) -> str:
        """Open a ciphertext written by :meth:`encrypt` under any configured key."""
        if len(blob) < 1 + _KEY_ID_LEN + _NONCE_LEN + 16 or blob[0] != _FORMAT:
            raise DecryptError("unknown ciphertext format")
        kid, nonce = blob[1 : 1 + _KEY_ID_LEN], blob[1 + _KEY_ID_LEN : 1 + _KEY_ID_LEN + _NONCE_LEN]
        aead = self._by_id.get(bytes(kid))
        if aead is None:
            raise DecryptError("ciphertext was written with a key that is not configured")
        try:
            return aead.decrypt(nonce, bytes(blob[1 + _KEY_ID_LEN + _NONCE_LEN :]), context.encode()).decode()
        except InvalidTag as exc:
            raise DecryptError("ciphertext does not open with its key and context") from exc


def new_signing_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def webhook_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks signature header value: ``v1,<base64 HMAC-SHA256 of "id.ts.body">``."""
    return signing.standard_signature(secret, msg_id, timestamp, body)


def new_token(prefix: str) -> str:
    """A fresh credential: ``prefix`` + base64url(32 random bytes) without padding (``awt_`` → 47 chars)."""
    return prefix + base64.urlsafe_b64encode(secrets.token_bytes(TOKEN_BYTES)).rstrip(b"=").decode()


_TOKEN_BODY = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url of TOKEN_BYTES, unpadded


def token_shape_ok(token: str, prefix: str) -> bool:
    """Cheap syntactic check before any database work: right prefix, length and alphabet."""
    return token.startswith(prefix) and _TOKEN_BODY.fullmatch(token, len(prefix)) is not None


def digest(token: str) -> bytes:
    """The lookup key stored for a token: SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(token.encode()).digest()


def hint(secret: str) -> str:
    """The last four characters, the only part of a secret ever shown again."""
    return secret[-4:]


def ensure_key_file(data_dir: Path) -> str:
    """Return the embedded-mode secret key, generating it once into ``data_dir/secret.key`` (mode 0600)."""
    path = data_dir / "secret.key"
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        value = path.read_text().strip()
        decode_secret_key(value)
        return value
    value = base64.b64encode(secrets.token_bytes(32)).decode()
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value
