"""Per-IP gates of the webhook ingress (DESIGN §4 step 1), held in this process's memory.

Two fixed windows per client IP, each ``rate_window_s`` long and anchored at the IP's first request in
the window: an absolute cap that every request counts against, and a bad-credential debt that only
unknown tokens (404) and bad or missing signatures (401) add to but every request is checked against.
The runtime API shares the debt: a report or renew sent without a runtime token for a task that is not an
HTTP agent's, or with a wrong lease token, adds to it, and such a request is refused while it is due.
Nothing is written to the database per request, so N gateways behind a balancer admit up to N times
each cap.

Memory is bounded: each table keeps at most ``rate_table_size`` IPs and evicts the least recently seen
one when full (a flood of distinct addresses costs old entries, never unbounded memory). An evicted IP
starts a fresh window, which is the price of the bound.

The client IP is the TCP peer. ``X-Forwarded-For`` and ``X-Real-IP`` are believed only when the peer is
inside a configured trusted-proxy CIDR; then the client is the right-most forwarded address that is not
itself a trusted proxy (entries to its left were written by the client and may be spoofed).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from hookgate import metrics
from hookgate.settings import Settings

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
UNKNOWN_PEER = "unknown"


class Window:
    """Fixed-window counters per key, at most ``max_keys`` of them (least recently seen evicted first)."""

    def __init__(self, cap: int, window_s: float, max_keys: int, clock: Callable[[], float]) -> None:
        self.cap, self.window_s, self.max_keys, self._clock = cap, window_s, max_keys, clock
        self._slots: OrderedDict[str, list[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._slots)

    def _slot(self, key: str) -> list[float]:
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

    def retry_after(self, key: str) -> int | None:
        """Whole seconds until ``key`` may try again if it is at its cap, else None (does not count)."""
        slot = self._slots.get(key)
        if slot is None or slot[1] < self.cap:
            return None
        left = slot[0] + self.window_s - self._clock()
        if left <= 0:
            return None
        return max(1, math.ceil(left))

    def hit(self, key: str) -> int | None:
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

    def admit(self, ip: str) -> int | None:
        """Step 1: count the request; Retry-After seconds if the IP is over either gate, else None."""
        if (wait := self.indebted(ip)) is not None:
            return wait
        if (wait := self.requests.hit(ip)) is not None:
            metrics.RATE_REJECTIONS.labels("ip_cap").inc()
        return wait

    def indebted(self, ip: str) -> int | None:
        """Retry-After seconds if the IP's bad-credential debt is at its cap, else None (counts nothing)."""
        wait = self.debt.retry_after(ip)
        if wait is not None:
            metrics.RATE_REJECTIONS.labels("bad_credentials").inc()
        return wait

    def charge(self, ip: str) -> None:
        """Add one bad credential (unknown token, bad or missing signature) to the IP's debt."""
        self.debt.hit(ip)


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDR strings (already validated by the settings) as network objects."""
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _trusted(addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None, nets: tuple[IPNetwork, ...]) -> bool:
    return addr is not None and any(addr in net for net in nets)


def client_ip(peer: str | None, headers: Mapping[str, str], trusted: tuple[IPNetwork, ...]) -> str:
    """The client address: the peer, or what a trusted proxy forwarded (see the module docstring)."""
    if not peer:
        return UNKNOWN_PEER
    if not trusted or not _trusted(_address(peer), trusted):
        return peer
    forwarded = headers.get("x-forwarded-for")
    if forwarded:
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        for hop in reversed(hops):
            addr = _address(hop)
            if addr is None:
                return peer  # our proxy wrote garbage: fall back to what we can see
            if not _trusted(addr, trusted):
                return str(addr)
        return str(_address(hops[0])) if hops else peer
    real = _address(headers.get("x-real-ip", ""))
    return str(real) if real is not None else peer
