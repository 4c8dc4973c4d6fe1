"""Webhook token lookup for the ingress (ARCHITECTURE §4 step 2), with a short per-process cache.

The token is looked up by its SHA-256 digest (one prepared statement that also reads the admission
facts). A hit may be cached for ``LOOKUP_TTL_S``: that is safe only because the persisting statement
re-checks the digest and a fingerprint of every trigger and autopilot field ingress decides on, so a
rotated token, a new signing secret, a pause or an edit is seen by the very next write on every
process; a stale entry costs one extra lookup, never a wrong delivery. Misses are never cached
(unknown tokens pay bad-credential debt instead). A previous signing secret is cached no longer than
its grace window has left.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import rules
from hookgate import crypto
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
    digest: bytes
    consistent: bool
    enabled: bool
    autopilot_status: str
    event_filters: tuple[str, ...]
    secrets: tuple[str, ...]
    fingerprint: str
    """Digest of the fields decided on; the persisting statement refuses to write if it changed."""
    facts: asyncpg.Record
    db_offset: float
    """Database clock minus this process's clock, seconds: signature tolerances use the DB's time."""

    def now(self) -> float:
        """Unix seconds by the database clock (as of the lookup's offset)."""
        return time.time() + self.db_offset


def _secrets(row: asyncpg.Record, keyring: crypto.Keyring) -> tuple[str, ...]:
    context = rules.signing_secret_context(row["trigger_id"])
    sealed = (row["signing_secret_ct"], row["previous_secret_ct"])
    return tuple(keyring.decrypt(bytes(ct), context) for ct in sealed if ct is not None)


def _trigger(row: asyncpg.Record, digest: bytes, keyring: crypto.Keyring) -> Trigger:
    filters = row["event_filters"] if isinstance(row["event_filters"], list) else []
    return Trigger(
        id=row["trigger_id"], workspace_id=row["workspace_id"], autopilot_id=row["autopilot_id"],
        provider=row["provider"], digest=digest, consistent=row["consistent"], enabled=row["trigger_enabled"],
        autopilot_status=row["autopilot_status"],
        event_filters=tuple(f for f in filters if isinstance(f, str)), secrets=_secrets(row, keyring),
        fingerprint=row["fingerprint"], facts=row,
        db_offset=row["db_epoch"] - time.time(),
    )


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
