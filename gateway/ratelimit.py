"""Per-IP gates of the webhook ingress (ARCHITECTURE §4 step 1), held in this process's memory.

Two fixed windows per client address, each ``rate_window_s`` long and anchored at the address's first
request in the window: an absolute cap that every request counts against, and a bad-credential debt that
only unknown tokens (404) and bad or missing signatures (401) add to but every request is checked against.
The admin API, the runtime API and the dashboard login share the debt (:mod:`gateway.debt`): their refused
credentials add to it, and their requests are refused while it is due.
Nothing is written to the database per request, so N gateways behind a balancer admit up to N times
each cap.

The client address is the TCP peer. ``X-Forwarded-For`` and ``X-Real-IP`` are believed only when the peer
is inside ``HOOKGATE_TRUSTED_PROXIES`` (a loopback peer included: nothing is trusted by default); then the
client is the right-most forwarded address that is not itself a trusted proxy (entries to its left were
written by the client and may be spoofed). A forwarded value that is not an IP address is ignored and the
peer is used.

Windows are keyed by the parsed address packed into :data:`KEY_BYTES` bytes, so every spelling of one
address is one key: an IPv4-mapped IPv6 address (``::ffff:1.2.3.4``) is its IPv4 address, zone ids are
dropped, and an IPv6 address counts as its /64 (one host or site gets a /64; keying by the full address
would give it 2^64 fresh windows and let it flush the tables).

Memory is bounded in bytes: each table keeps at most ``rate_table_size`` keys and evicts the least recently
seen one when full. An entry is a fixed-size key and a two-float list, at most :data:`ENTRY_BYTES` bytes
with the table's own overhead, so a table never exceeds ``rate_table_size * ENTRY_BYTES``. An evicted
address starts a fresh window, which is the price of the bound.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from starlette.datastructures import Headers

from hookgate import metrics
from hookgate.settings import Settings

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

KEY_BYTES = 16
#: Upper bound of one table entry with its share of the table (measured 290-410 bytes on CPython 3.11).
ENTRY_BYTES = 448
#: The key of a request whose peer address is unknown (no socket address); no address packs to it.
UNKNOWN_KEY = b"\xff" * KEY_BYTES
_MAPPED_PREFIX = bytes(10) + b"\xff\xff"


class Window:
    """Fixed-window counters per key, at most ``max_keys`` of them (least recently seen evicted first)."""

    def __init__(self, cap: int, window_s: float, max_keys: int, clock: Callable[[], float]) -> None:
        self.cap, self.window_s, self.max_keys, self._clock = cap, window_s, max_keys, clock
        self._slots: OrderedDict[bytes, list[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._slots)

    def _slot(self, key: bytes) -> list[float]:
        now = self._clock()
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = [now, 0.0]
            if len(self._slots) > self.max_keys:
                self._slots.popitem(last=False)
        else:
            self._slots.move_to_end(key)
            if now - slot[0] >= self.window_s:
                slot[0], slot[1] = now, 0.0
        return slot

    def retry_after(self, key: bytes) -> int | None:
        """Whole seconds until ``key`` may try again if it is at its cap, else None (does not count)."""
        slot = self._slots.get(key)
        if slot is None or slot[1] < self.cap:
            return None
        left = slot[0] + self.window_s - self._clock()
        if left <= 0:
            return None
        return max(1, math.ceil(left))

    def hit(self, key: bytes) -> int | None:
        """Count one event for ``key``; returns the Retry-After seconds if it was already at its cap."""
        slot = self._slot(key)
        if slot[1] >= self.cap:
            return max(1, math.ceil(slot[0] + self.window_s - self._clock()))
        slot[1] += 1
        return None


class RateGates:
    """The absolute request cap and the bad-credential debt of one gateway process."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        size, window = settings.rate_table_size, settings.rate_window_s
        self.requests = Window(settings.ip_request_cap, window, size, clock)
        self.debt = Window(settings.ip_bad_credential_cap, window, size, clock)
        self.trusted = parse_networks(settings.trusted_proxies)

    def admit(self, key: bytes) -> int | None:
        """Step 1: count the request; Retry-After seconds if the key is over either gate, else None."""
        if (wait := self.indebted(key)) is not None:
            return wait
        if (wait := self.requests.hit(key)) is not None:
            metrics.RATE_REJECTIONS.labels("ip_cap").inc()
        return wait

    def indebted(self, key: bytes) -> int | None:
        """Retry-After seconds if the key's bad-credential debt is at its cap, else None (counts nothing)."""
        wait = self.debt.retry_after(key)
        if wait is not None:
            metrics.RATE_REJECTIONS.labels("bad_credentials").inc()
        return wait

    def charge(self, key: bytes) -> None:
        """Add one bad credential (unknown token, bad signature, refused key or runtime token) to the key's debt."""
        self.debt.hit(key)


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDR strings (already validated by the settings) as network objects."""
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


@functools.lru_cache(maxsize=8)
def networks(cidrs: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    """:func:`parse_networks`, cached: for callers that see the settings on every request."""
    return parse_networks(cidrs)


@functools.lru_cache(maxsize=4096)  # every request parses its peer; ipaddress takes microseconds to do it
def parse_address(text: str | None) -> IPAddress | None:
    """``text`` as an IP address without its zone id (an IPv4-mapped IPv6 address as IPv4), else None."""
    if not text:
        return None
    try:
        addr = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return addr.ipv4_mapped
        if addr.scope_id is not None:
            return ipaddress.IPv6Address(addr.packed)
    return addr


def _trusted(addr: IPAddress | None, nets: tuple[IPNetwork, ...]) -> bool:
    return addr is not None and any(addr in net for net in nets)


def client_address(peer: str | None, headers: Headers, trusted: tuple[IPNetwork, ...]) -> IPAddress | None:
    """The client address: the peer, or what a trusted proxy forwarded (see the module docstring)."""
    addr = parse_address(peer)
    if not trusted or not _trusted(addr, trusted):
        return addr
    forwarded = ",".join(headers.getlist("x-forwarded-for"))  # several header lines are one list
    if forwarded.strip(", \t"):
        return _forwarded_client(forwarded, trusted) or addr
    return parse_address(headers.get("x-real-ip")) or addr


def _forwarded_client(forwarded: str, trusted: tuple[IPNetwork, ...]) -> IPAddress | None:
    hops = [hop for hop in forwarded.split(",") if hop.strip()]
    for hop in reversed(hops):
        addr = parse_address(hop)
        if addr is None:
            return None  # our proxy passed on garbage: fall back to what we can see
        if not _trusted(addr, trusted):
            return addr
    return parse_address(hops[0])  # every hop is a trusted proxy: the first one is the client


def rate_key(addr: IPAddress | None) -> bytes:
    """The :data:`KEY_BYTES`-byte window key of ``addr``: IPv4 as ``::ffff:a.b.c.d``, IPv6 by its /64."""
    if addr is None:
        return UNKNOWN_KEY
    if isinstance(addr, ipaddress.IPv4Address):
        return _MAPPED_PREFIX + addr.packed
    return addr.packed[:8] + bytes(8)


def client_key(peer: str | None, headers: Headers, trusted: tuple[IPNetwork, ...]) -> bytes:
    """The rate key of the request's client address (:func:`client_address`, then :func:`rate_key`)."""
    return rate_key(client_address(peer, headers, trusted))
