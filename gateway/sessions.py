"""Dashboard sessions: a signed cookie naming a session row in the database, and CSRF tokens bound to it.

The cookie holds ``{key id, nonce, expiry}`` and an HMAC-SHA256 over it, keyed by a key derived from
``HOOKGATE_SECRET_KEY`` (so rotating that key logs everyone out, and a forged cookie costs no query). It never
holds the API key itself. The nonce is the session's random id: the database keeps only its SHA-256 (table
``dashboard_session``), every request looks the row up with the key's and member's liveness, and logout deletes
it, so a logged-out cookie replayed is refused at once by every gateway process, as is one of a revoked key.
A CSRF token is an HMAC of the session nonce: a page of another site can neither read nor forge it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from hookgate import crypto
from hookgate.crypto import Keyring
from hookgate.database import Conn
from sql import Q

SESSION_COOKIE = "hookgate_session"
LOGIN_COOKIE = "hookgate_login"
#: A session lasts a working day; logging in again is cheap.
SESSION_TTL_S = 12 * 3600
_PURPOSE = "dashboard-session"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Session:
    """A verified session: which API key logged in, and the nonce its CSRF tokens are bound to."""

    key_id: str
    nonce: str
    expires_at: int

    @property
    def digest(self) -> bytes:
        """What the database keeps of the session id: its SHA-256, never the id itself."""
        return crypto.digest(self.nonce)


class Signer:
    """Signs and verifies session cookies and CSRF tokens with a key derived from the keyring."""

    def __init__(self, keyring: Keyring) -> None:
        self._key = keyring.derive(_PURPOSE)

    def _mac(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def issue(self, key_id: str, now: float | None = None) -> tuple[str, Session]:
        """A new cookie value for a logged-in key, and the session it encodes."""
        session = Session(key_id, secrets.token_urlsafe(16), int((now or time.time()) + SESSION_TTL_S))
        body = json.dumps({"k": session.key_id, "n": session.nonce, "e": session.expires_at}).encode()
        return f"{_b64(body)}.{_b64(self._mac(body))}", session

    def verify(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session in a cookie if its signature holds and it has not expired; else None."""
        if not cookie or cookie.count(".") != 1:
            return None
        try:
            body_text, mac_text = cookie.split(".")
            body = _unb64(body_text)
            if not hmac.compare_digest(self._mac(body), _unb64(mac_text)):
                return None
            data: dict[str, Any] = json.loads(body)
            session = Session(str(data["k"]), str(data["n"]), int(data["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires_at > (now or time.time()) else None

    def csrf(self, nonce: str) -> str:
        """The CSRF token for forms of the session (or login page) with this nonce."""
        return _b64(self._mac(b"csrf\x00" + nonce.encode()))

    def csrf_ok(self, nonce: str, token: object) -> bool:
        """True if ``token`` is this nonce's CSRF token (constant-time)."""
        return isinstance(token, str) and hmac.compare_digest(self.csrf(nonce), token)


def new_login_nonce() -> str:
    """A random nonce for the login form's pre-session cookie."""
    return secrets.token_urlsafe(16)


async def start(conn: Conn, session: Session) -> None:
    """Record a login's session, so that later requests find it until it expires or logs out."""
    await conn.execute(Q.dashboard_session_insert, session.digest, UUID(session.key_id), SESSION_TTL_S)


async def principal_row(conn: Conn, session: Session) -> asyncpg.Record | None:
    """The live member of a session still recorded and unexpired (key not revoked, member enabled), else None."""
    return await conn.fetchrow(Q.dashboard_session_principal, session.digest)


async def end(conn: Conn, session: Session) -> None:
    """Logout: delete the session, so its cookie is refused from now on by every gateway process."""
    await conn.execute(Q.dashboard_session_delete, session.digest)
