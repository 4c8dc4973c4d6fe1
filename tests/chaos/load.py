"""The webhook load: new signed events from several presets, provider retries of earlier ones, forgeries.

Every answer is recorded per event, so the checks can prove that each 2xx names a stored delivery and that
all 2xx answers for one event name the same delivery. An event answered 503 (or not answered at all) is
retried later, as a provider would.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import httpx

from tests.chaos.signers import PRESETS, Event, new_event, sign


@dataclass
class Load:
    """Sends ``total`` requests at about ``rate`` per second to the gateways' webhook URLs."""

    urls: dict[str, list[str]]  # preset -> hook URL on each gateway
    total: int
    rate: float
    retry_share: float = 0.2
    forged_share: float = 0.03
    rng: random.Random = field(default_factory=random.Random)
    statuses: Counter[int | str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # accepted, duplicate, rejected, ...
    delivered: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    forged_2xx: int = 0
    sent: int = 0
    _events: list[Event] = field(default_factory=list)
    _unanswered: list[Event] = field(default_factory=list)

    async def run(self) -> None:
        """Send everything, paced; at most 64 requests in flight."""
        gate = asyncio.Semaphore(64)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=20, limits=limits) as client:
            start = time.monotonic()
            tasks = []
            for n in range(self.total):
                await asyncio.sleep(max(0.0, start + n / self.rate - time.monotonic()))
                await gate.acquire()
                tasks.append(asyncio.create_task(self._one(client, n, gate)))
            await asyncio.gather(*tasks)

    async def settle(self, deadline_s: float = 60) -> None:
        """Resend events that never got a final answer until each has one (providers retry for days)."""
        async with httpx.AsyncClient(timeout=20) as client:
            end = time.monotonic() + deadline_s
            while self._unanswered and time.monotonic() < end:
                pending, self._unanswered = self._unanswered, []
                for event in pending:
                    await self._send(client, event, forged=False)
                if self._unanswered:
                    await asyncio.sleep(1)

    @property
    def unanswered(self) -> int:
        """Events still without a final answer."""
        return len(self._unanswered)

    async def _one(self, client: httpx.AsyncClient, n: int, gate: asyncio.Semaphore) -> None:
        try:
            event, forged = self._pick(n)
            await self._send(client, event, forged=forged)
        finally:
            gate.release()

    def _pick(self, n: int) -> tuple[Event, bool]:
        roll = self.rng.random()
        if self._events and roll < self.retry_share:
            return self.rng.choice(self._events), False
        if self._events and roll < self.retry_share + self.forged_share:
            return self.rng.choice(self._events), True  # a forged retry must never touch the original
        event = new_event(PRESETS[n % len(PRESETS)], n)
        self._events.append(event)
        return event, False

    async def _send(self, client: httpx.AsyncClient, event: Event, *, forged: bool) -> None:
        url = self.rng.choice(self.urls[event.preset])
        self.sent += 1
        try:
            answer = await client.post(url, content=event.raw, headers=sign(event, forged=forged))
        except httpx.HTTPError as exc:
            self.statuses[type(exc).__name__] += 1
            if not forged:
                self._unanswered.append(event)
            return
        self.statuses[answer.status_code] += 1
        self._record(event, forged, answer)

    def _record(self, event: Event, forged: bool, answer: httpx.Response) -> None:
        body = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
        self.outcomes[str(body.get("status", body.get("error", answer.status_code)))] += 1
        if answer.status_code >= 500 and not forged:
            self._unanswered.append(event)
        elif 200 <= answer.status_code < 300:
            if forged:
                self.forged_2xx += 1
            else:
                self.delivered[(event.preset, event.key)].add(str(body.get("delivery_id")))
