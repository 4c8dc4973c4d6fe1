"""Webhook token lookup for the ingress (ARCHITECTURE §4 step 2), with a short per-process cache.

Concurrent lookups of one digest share one query (:class:`TriggerLookup`).

The token is looked up by its SHA-256 digest (one prepared statement that also reads the admission
facts). A hit may be cached for ``LOOKUP_TTL_S``: that is safe only because the persisting statement
re-checks the digest and a fingerprint of every trigger and autopilot field ingress decides on, so a
rotated token, a new signing secret, a pause or an edit is seen by the very next write on every
process; a stale entry costs one extra lookup, never a wrong delivery. Misses are never cached
(unknown tokens pay bad-credential debt instead). A previous signing secret is cached no longer than
its grace window has left.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import admission, rules
from gateway import handshakes, providers, schemes
from gateway.handshakes import AnyHandshake
from gateway.providers import Preset
from gateway.replies import SuccessReply
from hookgate import crypto, metrics
from hookgate.context import Context
from hookgate.database import Conn
from sql import Q

LOOKUP_TTL_S = 1.0
LOOKUP_CACHE_SIZE = 10_000


@dataclass(frozen=True)
class Trigger:
    """What the ingress knows about a live webhook trigger, as of one lookup."""

    id: UUID
    workspace_id: UUID
    autopilot_id: UUID
    provider: str
    preset: Preset
    """The preset's event names and dedupe keys, with the trigger's own signature scheme if it has one."""
    digest: bytes
    consistent: bool
    secrets: tuple[str, ...]
    fingerprint: str
    """Digest of the fields decided on; the persisting statement refuses to write if it changed."""
    facts: admission.Facts
    """What step 9 and the admission gate decide on, read with the token."""
    db_offset: float
    """Database clock minus this process's clock, seconds: signature tolerances use the DB's time."""
    handshake: AnyHandshake | None = None
    """The handshake answered (its own, else its preset's; gateway/handshakes.py)."""
    verify_token: str | None = None
    """A Meta handshake's verify token, decrypted."""
    reply: SuccessReply | None = None
    """What accepted and duplicate deliveries are answered, when not the JSON receipt."""
    memo: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    """What the ingress's decisions computed from this lookup alone, kept as long as it is (its admitted plan)."""

    def now(self) -> float:
        """Unix seconds by the database clock (as of the lookup's offset)."""
        return time.time() + self.db_offset


def _secrets(row: asyncpg.Record, keyring: crypto.Keyring) -> tuple[str, ...]:
    context = rules.signing_secret_context(row["trigger_id"])
    sealed = (row["signing_secret_ct"], row["previous_secret_ct"])
    return tuple(keyring.decrypt(bytes(ct), context) for ct in sealed if ct is not None)


def _verify_token(row: asyncpg.Record, keyring: crypto.Keyring) -> str | None:
    sealed = row["verify_token_ct"]
    return None if sealed is None else keyring.decrypt(bytes(sealed), rules.verify_token_context(row["trigger_id"]))


def _trigger(row: asyncpg.Record, digest: bytes, keyring: crypto.Keyring) -> Trigger:
    return Trigger(
        id=row["trigger_id"], workspace_id=row["workspace_id"], autopilot_id=row["autopilot_id"],
        provider=row["provider"], preset=preset_of(row), digest=digest,
        consistent=row["consistent"], secrets=_secrets(row, keyring),
        fingerprint=row["fingerprint"], facts=admission.Facts.from_row(row), db_offset=row["db_epoch"] - time.time(),
        handshake=handshakes.for_trigger(row["provider"], row["handshake"]), verify_token=_verify_token(row, keyring),
        reply=None if row["reply"] is None else SuccessReply.model_validate(row["reply"]),
    )


def preset_of(row: asyncpg.Record | Mapping[str, Any]) -> Preset:
    """The preset a trigger is checked by: its provider's, with its own signature scheme and sources if set."""
    preset = schemes.get_preset("generic" if row["provider"] == "custom" else row["provider"])
    if row["signature_scheme"] is not None:
        custom = schemes.as_preset(schemes.parse_scheme(row["signature_scheme"]))
        preset = replace(preset, name=row["provider"], check=custom.check, explain=custom.explain,
                         signature_headers=custom.signature_headers)
    if row["dedupe_key_source"] is not None:
        preset = replace(preset, dedupe_sources=(row["dedupe_key_source"],))
    if (source := row["event_source"]) is not None:
        preset = replace(preset, namer=providers.source_namer(source))
    return preset


class TriggerCache:
    """Digest → (expiry, Trigger), least recently used evicted first; hits only, for ``ttl`` seconds."""

    def __init__(self, ttl: float = LOOKUP_TTL_S, size: int = LOOKUP_CACHE_SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.size, self._clock = ttl, size, clock
        self._entries: OrderedDict[bytes, tuple[float, Trigger]] = OrderedDict()

    def get(self, digest: bytes) -> Trigger | None:
        """A fresh cached trigger, or None."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[digest]
            return None
        self._entries.move_to_end(digest)
        return entry[1]

    def put(self, trigger: Trigger, ttl: float) -> None:
        """Remember a hit for ``ttl`` seconds (at most the cache's own TTL)."""
        if ttl <= 0 or self.ttl <= 0:
            return
        self._entries[trigger.digest] = (self._clock() + min(ttl, self.ttl), trigger)
        self._entries.move_to_end(trigger.digest)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def drop(self, digest: bytes) -> None:
        """Forget a digest (its entry proved stale)."""
        self._entries.pop(digest, None)


async def lookup(conn: Conn, keyring: crypto.Keyring, digest: bytes, cache: TriggerCache | None = None,
                 now: datetime | None = None, *, heartbeat_timeout_s: float) -> Trigger | None:
    """The live webhook trigger with this token digest, or None for a miss; a hit is put in ``cache``.

    The admission facts read with it judge the runtime ready by ``heartbeat_timeout_s`` (the setting).
    """
    row = await conn.fetchrow(Q.ingress_trigger_lookup, digest, heartbeat_timeout_s, now)
    if row is None:
        return None
    trigger = _trigger(row, digest, keyring)
    if cache is not None and trigger.consistent:  # an inconsistent trigger is a miss: never cached
        grace: Any = row["previous_secret_ttl_s"]
        cache.put(trigger, cache.ttl if grace is None else float(grace))
    return trigger


class TriggerLookup:
    """Step 2 over a pool: the cache first, else one query per digest however many requests wait for it."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.cache = ctx, TriggerCache()
        self.inflight: dict[bytes, asyncio.Task[Trigger | None]] = {}
        """Lookups in flight by digest: concurrent requests for one token share one query."""

    async def find(self, digest: bytes, *, cached: bool = True) -> Trigger | None:
        """The trigger of ``digest``, from the cache if ``cached`` and fresh, else from the database.

        A cache miss joins the lookup already in flight for the same digest, if there is one: when a busy
        trigger's entry expires, every request that arrives before the first lookup returns would otherwise
        send its own query (dozens per second under load, and as many pooled connections).
        """
        if not cached:
            return await self._fetch(digest)
        if (hit := self.cache.get(digest)) is not None:
            return hit  # no connection taken at all
        pending = self.inflight.get(digest)
        if pending is None:
            pending = self.inflight[digest] = asyncio.ensure_future(self._fetch(digest))
            pending.add_done_callback(lambda done: self._done(digest, done))
        return await asyncio.shield(pending)  # a waiter that goes away does not cancel the others' lookup

    def _done(self, digest: bytes, done: asyncio.Task[Trigger | None]) -> None:
        if self.inflight.get(digest) is done:
            del self.inflight[digest]
        if not done.cancelled():
            done.exception()  # retrieved here: every waiter may be gone (their own errors are raised to them)

    async def _fetch(self, digest: bytes) -> Trigger | None:
        metrics.INGRESS_LOOKUPS.inc()
        s = self.ctx.settings
        async with self.ctx.pool.acquire(timeout=s.pool_acquire_timeout) as conn:
            return await lookup(conn, self.ctx.keyring, digest, self.cache, heartbeat_timeout_s=s.heartbeat_timeout_s)
