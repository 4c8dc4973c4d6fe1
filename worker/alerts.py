"""The alert sender: delivers queued notifications to their channels, Standard-Webhooks-signed, durably.

A pass leases due notifications (``FOR UPDATE SKIP LOCKED``, a fresh lease token per attempt, so two senders
never hold one row and a crashed sender's rows come back when their lease ends) and POSTs each to its
channel's URL: body ``{"type", "timestamp", "data"}``, headers ``webhook-id`` (the notification id, the
same on every attempt so a receiver can drop repeats), ``webhook-timestamp`` and ``webhook-signature``
(``v1,<base64 HMAC>`` by the channel's ``whsec_`` secret). Every connection passes the egress policy on the
address it is about to reach, as pushes do; the answer is read within a cap and the whole request within a
timeout. 2xx is sent; 408, 429, 5xx, timeouts and connection errors are tried again on the schedule of
``HOOKGATE_PUSH_RETRY_SCHEDULE`` (``Retry-After`` honoured), then failed; any other 4xx and an address the
policy refuses fail at once. Outcomes are written under the lease token: a sender whose lease was taken
over changes nothing. Woken by NOTIFY on ``hookgate_alerts``, and polls every ``HOOKGATE_WORKER_POLL_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import aiohttp

from autopilot import alerts
from hookgate import crypto, egress, notify, retry
from hookgate.context import Context
from hookgate.notify import NotifyListener
from sql import Q
from worker.loop import PollingService
from worker.push import RETRY_STATUSES, read_capped, retry_after_s

log = logging.getLogger("hookgate.alerts")

#: Notifications leased per pass (and sent concurrently).
BATCH = 16
#: Longest a receiver may take to answer one notification.
SEND_TIMEOUT_S = 10.0
#: The lease outlives the send by this much: a crashed sender's notification is sent again soon after.
LEASE_MARGIN_S = 20.0
#: Bytes of a receiver's answer read at most (the answer is not kept, only its status).
MAX_ANSWER_BYTES = 4096
UNREACHABLE = "unreachable: the channel URL could not be reached"
TIMEOUT = "timeout: the channel URL did not answer in time"
FORBIDDEN = "egress_forbidden: the channel URL points at an address Hookgate does not call"


@dataclass(frozen=True)
class Leased:
    """A notification this sender holds, with what sending it needs."""

    id: UUID
    channel_id: UUID
    event: str
    payload: dict[str, Any]
    attempt: int
    lease_token: UUID
    created_at: datetime
    url: str
    signing_secret_ct: bytes


@dataclass(frozen=True)
class Outcome:
    """What a send came to: ``sent``, ``retry`` (a transient fault) or ``failed`` (no use trying again)."""

    kind: str
    status: int | None = None
    error: str | None = None
    retry_after_s: float | None = None


def body(leased: Leased) -> bytes:
    """The JSON body of a notification: its event type, when it was raised, and its data."""
    return json.dumps({"type": leased.event, "timestamp": leased.created_at.isoformat(), "data": leased.payload},
                      separators=(",", ":"), ensure_ascii=False).encode()


def classify(status: int, retry_after: str | None) -> Outcome:
    """A receiver's HTTP status as an outcome (the same rules as pushes to agents)."""
    if 200 <= status < 300:
        return Outcome("sent", status)
    if status in RETRY_STATUSES or status >= 500:
        return Outcome("retry", status, f"the channel URL answered {status}", retry_after_s(retry_after))
    return Outcome("failed", status, f"the channel URL answered {status}")


class AlertSender(PollingService):
    """Leases due notifications and sends them, a batch at a time, each outcome guarded by its lease token."""

    name = "alerts"
    channel = notify.ALERTS

    def __init__(self, ctx: Context, *, wake: NotifyListener | None = None) -> None:
        super().__init__(interval=ctx.settings.worker_poll_s, wake=wake)
        self.ctx = ctx
        self.schedule = retry.Schedule.parse(ctx.settings.push_retry_schedule)
        self.egress = egress.Policy.from_settings(ctx.settings)
        self._client: aiohttp.ClientSession | None = None
        #: Notifications this sender delivered (2xx), for tests and logs.
        self.sent = 0

    async def run_once(self, now: datetime | None = None) -> int:
        """Lease up to a batch of due notifications and send them concurrently; returns how many."""
        async with self.ctx.pool.acquire() as conn:
            rows = await conn.fetch(Q.notification_claim, BATCH, SEND_TIMEOUT_S + LEASE_MARGIN_S, now)
        leased = [Leased(**{k: r[k] for k in Leased.__dataclass_fields__}) for r in rows]
        await asyncio.gather(*(self._guarded(n) for n in leased))
        return len(leased)

    async def _guarded(self, leased: Leased) -> None:
        try:
            await self.send(leased)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The lease still protects it: it ends, and the next pass sends the notification again.
            log.exception("notification send failed unexpectedly", extra={"notification_id": str(leased.id)})

    async def send(self, leased: Leased) -> str:
        """One attempt at a leased notification, its outcome recorded; returns the status it now has (or lost)."""
        if leased.attempt > self.schedule.attempts:
            # Taken over from a sender that died during the last attempt: none is left.
            return await self._record(leased, Outcome("failed", None, "no attempt left after a lost lease"))
        return await self._record(leased, await self._post(leased))

    async def _post(self, leased: Leased) -> Outcome:
        secret = self.ctx.keyring.decrypt(bytes(leased.signing_secret_ct), alerts.secret_context(leased.channel_id))
        raw, stamp = body(leased), int(time.time())
        headers = {"content-type": "application/json", "user-agent": "hookgate", "webhook-id": str(leased.id),
                   "webhook-timestamp": str(stamp),
                   "webhook-signature": crypto.webhook_signature(secret, str(leased.id), stamp, raw)}
        try:
            async with self.egress.attempt(leased.url) as attempt:
                return await self._send(leased.url, raw, headers, attempt)
        except egress.EgressRefused:
            return Outcome("failed", None, FORBIDDEN)

    async def _send(self, url: str, raw: bytes, headers: dict[str, str], attempt: egress.Attempt) -> Outcome:
        """POST once; every transport fault reads the same (no port-scan oracle)."""
        timeout = aiohttp.ClientTimeout(total=SEND_TIMEOUT_S)
        try:
            async with self._session(attempt) as client, client.post(
                    url, data=raw, headers=headers, timeout=timeout, allow_redirects=False) as response:
                await read_capped(response.content, MAX_ANSWER_BYTES)
                return classify(response.status, response.headers.get("retry-after"))
        except TimeoutError:
            return Outcome("retry", None, TIMEOUT)
        except (aiohttp.ClientError, OSError):
            return Outcome("failed", None, FORBIDDEN) if attempt.refused else Outcome("retry", None, UNREACHABLE)

    @contextlib.asynccontextmanager
    async def _session(self, attempt: egress.Attempt) -> AsyncIterator[aiohttp.ClientSession]:
        """The shared session; a one-off one on a fresh connection when the path is under the gateway's /hooks/.

        A pooled connection was checked when it was opened, for another path (as in ``worker.push``).
        """
        if not attempt.own_ports:
            if self._client is None:
                self._client = aiohttp.ClientSession(connector=self.egress.connector(limit=BATCH))
            yield self._client
            return
        async with aiohttp.ClientSession(connector=self.egress.connector(force_close=True)) as session:
            yield session

    async def _record(self, leased: Leased, outcome: Outcome) -> str:
        """Write the outcome under the lease token: sent, failed, or queued again after the scheduled delay."""
        status, delay = outcome.kind, 0.0
        if outcome.kind == "retry":
            scheduled = self.schedule.delay(leased.attempt)
            status = "failed" if scheduled is None else "queued"
            delay = 0.0 if scheduled is None else retry.hinted(outcome.retry_after_s, scheduled)
        async with self.ctx.pool.acquire() as conn:
            row = await conn.fetchrow(Q.notification_record, leased.id, leased.lease_token, status,
                                      outcome.status, outcome.error, delay)
        if row is None:
            log.info("notification outcome after the lease was lost; not applied",
                     extra={"notification_id": str(leased.id)})
            return "lost"
        self.sent += status == "sent"
        return status

    async def run(self) -> None:
        """Send until :meth:`stop`; the current pass finishes its sends, then the HTTP client closes."""
        try:
            await super().run()
        finally:
            await self.close()

    async def close(self) -> None:
        """Close the HTTP client (a later send opens a new one)."""
        if self._client is not None:
            await self._client.close()
            self._client = None
