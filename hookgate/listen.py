"""``hookgate listen --forward-to URL``: a pull agent's runtime on a developer's machine, as ``stripe listen``.

It authenticates with the agent's ``hgr_`` token and does what any pull runtime does (heartbeat, long-poll
claim, renew while the local call runs), but hands each task to a local URL as a Standard-Webhooks-signed
POST, with the body an HTTP agent gets from a push minus the lease token and report URL (this process
reports). The local answer becomes the task's report: 2xx succeeded (a JSON body is the result); 408, 429,
5xx, timeouts and refused connections failed with retry class ``retryable`` (retried with backoff); any other
answer failed for good (``permanent``). One line per task on stdout (JSON lines with ``--json``).

Ctrl-C (or SIGTERM) stops claiming: a claim waiting for work is dropped (the gateway hands back a task it won
for us meanwhile) and the task in hand finishes and is reported. A second Ctrl-C stops waiting for the local
app and gives the task back as a retryable failure (the runtime API has no release call, so that attempt
counts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from hookgate.admin_client import ApiFailure, Client, client_settings, exit_on_failure, fail
from hookgate.crypto import new_signing_secret, webhook_signature

CLAIM_WAIT_S = 25.0
"""How long one claim waits for work (the gateway caps it at ``runtime_claim_max_wait_s``)."""
RESULT_MAX_BYTES = 64 * 1024
"""A local answer's body kept as the task result, as for a push."""
RETRYABLE_STATUSES = frozenset({408, 429})


@dataclass
class Outcome:
    """What the local app's answer means for the task, and how it is shown."""

    status: str
    http_status: int | None
    result: Any = None
    error: str | None = None
    retry_class: str | None = None

    def report(self, lease_token: str) -> dict[str, Any]:
        """The runtime API's report body."""
        body = {"lease_token": lease_token, "status": self.status, "result": self.result, "error": self.error,
                "retry_class": self.retry_class}
        return {k: v for k, v in body.items() if v is not None}


def outcome_of(answer: httpx.Response) -> Outcome:
    """2xx succeeded (a JSON body up to 64 KiB is the result); 408/429/5xx retryable; other answers permanent."""
    status = answer.status_code
    if 200 <= status < 300:
        result = None
        if len(answer.content) <= RESULT_MAX_BYTES:
            with contextlib.suppress(ValueError):
                result = answer.json()
        return Outcome("succeeded", status, result=result)
    retryable = status >= 500 or status in RETRYABLE_STATUSES
    return Outcome("failed", status, error=f"the local app answered {status}",
                   retry_class="retryable" if retryable else "permanent")


def transport_outcome(exc: httpx.TransportError, timeout: float) -> Outcome:
    """No answer from the local app: retryable, like a push to an agent that cannot be reached."""
    if isinstance(exc, httpx.TimeoutException):
        return Outcome("failed", None, error=f"timeout: the local app did not answer within {timeout:g}s",
                       retry_class="retryable")
    return Outcome("failed", None, error=f"unreachable: the local app could not be reached ({type(exc).__name__})",
                   retry_class="retryable")


@dataclass
class Stopping:
    """Ctrl-C once: stop claiming. Twice: give the task in hand back too."""

    claiming_ends: asyncio.Event = field(default_factory=asyncio.Event)
    task_ends: asyncio.Event = field(default_factory=asyncio.Event)

    def signal(self) -> None:
        """One more Ctrl-C or SIGTERM."""
        if self.claiming_ends.is_set():
            self.task_ends.set()
            return
        self.claiming_ends.set()
        print("stopping: no new tasks; the current one finishes (Ctrl-C again to give it back)", file=sys.stderr,
              flush=True)


async def _unless(stop: asyncio.Event, request: Coroutine[Any, Any, httpx.Response]) -> httpx.Response | None:
    """``request``'s answer, or None once ``stop`` is set first (the request is then cancelled)."""
    call = asyncio.create_task(request)
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({call, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not call.done():
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        return None
    return call.result()


@dataclass
class Listener:
    """One pull runtime instance forwarding its tasks to a local URL."""

    gateway: Client
    local: httpx.AsyncClient
    forward_to: str
    secret: str
    instance: str
    timeout: float
    as_json: bool
    stopping: Stopping = field(default_factory=Stopping)
    heartbeat_timeout_s: float = 120.0

    async def start(self) -> None:
        """First heartbeat (proves the token), then the banner with the signing secret, on stderr."""
        beat = await self.gateway.call("POST", "/v1/runtime/heartbeat", json_body={"instance": self.instance})
        self.heartbeat_timeout_s = float(beat.get("heartbeat_timeout_s", self.heartbeat_timeout_s))
        print(f"Ready! Forwarding the tasks of agent {beat['agent_id']} to {self.forward_to} "
              f"(instance {self.instance})\nYour webhook signing secret is {self.secret} (^C to quit)",
              file=sys.stderr, flush=True)

    async def serve(self) -> None:
        """Claim and forward until stopped."""
        while not self.stopping.claiming_ends.is_set():
            try:
                claimed = await self._claim()
            except httpx.TransportError as exc:
                print(f"hookgate: the gateway is unreachable ({type(exc).__name__}); retrying in 2s", file=sys.stderr,
                      flush=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.claiming_ends.wait(), 2)
                continue
            if claimed is not None:
                await self.handle(claimed)

    async def _claim(self) -> dict[str, Any] | None:
        """One long-poll claim, dropped when stopping (the gateway gives back a task won for us meanwhile)."""
        answer = await _unless(self.stopping.claiming_ends, self.gateway.http.post(
            "/v1/runtime/claim", json={"instance": self.instance, "wait_s": CLAIM_WAIT_S},
            timeout=CLAIM_WAIT_S + 30))
        if answer is None or answer.status_code == 204:
            return None
        if answer.status_code >= 400:
            body = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
            raise ApiFailure(answer.status_code, str(body.get("error", "error")), str(body.get("message", "")))
        claimed: dict[str, Any] = answer.json()
        return claimed

    async def handle(self, claimed: dict[str, Any]) -> None:
        """Forward one task, keep its lease and instance alive meanwhile, report the answer, print a line."""
        task, lease = claimed["task"], claimed["lease_token"]
        keepalive = asyncio.create_task(self._keep_alive(task["id"], lease, claimed["lease_expires_at"]))
        started = time.monotonic()
        try:
            outcome = await self._forward(task)
        finally:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keepalive
        latency_ms = round((time.monotonic() - started) * 1000)
        try:
            answer = await self.gateway.call("POST", f"/v1/runtime/tasks/{task['id']}/report",
                                             json_body=outcome.report(lease))
            reported = str(answer.get("status", outcome.status))
        except ApiFailure as exc:
            reported = f"not reported ({exc})"
        self._print(task, outcome, reported, latency_ms)

    async def _forward(self, task: dict[str, Any]) -> Outcome:
        body = json.dumps({"task_id": task["id"], "run_id": task["run_id"], "attempt": task["attempt"],
                           "autopilot": task["autopilot"], "payload": task["payload"]}).encode()
        now = int(time.time())
        headers = {"content-type": "application/json", "user-agent": "hookgate-listen", "webhook-id": task["id"],
                   "webhook-timestamp": str(now),
                   "webhook-signature": webhook_signature(self.secret, task["id"], now, body)}
        try:
            answer = await _unless(self.stopping.task_ends, self.local.post(self.forward_to, content=body,
                                                                              headers=headers, timeout=self.timeout))
            if answer is None:
                return Outcome("failed", None, error="given back: hookgate listen was stopped", retry_class="retryable")
            return outcome_of(answer)
        except httpx.TransportError as exc:
            return transport_outcome(exc, self.timeout)

    async def _keep_alive(self, task_id: str, lease: str, expires_at: str) -> None:
        """While the local call runs: heartbeat the instance and renew the lease before either lapses."""
        expires = datetime.fromisoformat(expires_at)
        while True:
            left = (expires - datetime.now(UTC)).total_seconds()
            await asyncio.sleep(max(1.0, min(self.heartbeat_timeout_s / 3, left / 2)))
            try:
                await self.gateway.call("POST", "/v1/runtime/heartbeat", json_body={"instance": self.instance})
                renewed = await self.gateway.call("POST", f"/v1/runtime/tasks/{task_id}/renew",
                                                  json_body={"lease_token": lease, "instance": self.instance})
                expires = datetime.fromisoformat(renewed["lease_expires_at"])
            except (ApiFailure, httpx.TransportError) as exc:
                print(f"hookgate: could not renew task {task_id}: {exc}", file=sys.stderr, flush=True)

    def _print(self, task: dict[str, Any], outcome: Outcome, reported: str, latency_ms: int) -> None:
        payload = task.get("payload")
        event = payload.get("event") if isinstance(payload, dict) else None
        line = {"task_id": task["id"], "run_id": task["run_id"], "attempt": task["attempt"], "event": event,
                "http_status": outcome.http_status, "status": reported, "latency_ms": latency_ms,
                "error": outcome.error}
        if self.as_json:
            print(json.dumps(line), flush=True)
            return
        answered = outcome.http_status if outcome.http_status is not None else "no answer"
        print(f"{datetime.now(UTC):%H:%M:%S}  {event or '-'}  task {task['id']}  --> {answered} "
              f"[{reported}] {latency_ms} ms" + (f"  ({outcome.error})" if outcome.error else ""), flush=True)


def _local_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text!r}")
    return text


def _whsec(text: str) -> str:
    import base64

    with contextlib.suppress(ValueError):  # binascii.Error is a ValueError
        if text.startswith("whsec_") and base64.b64decode(text.removeprefix("whsec_"), validate=True):
            return text
    raise argparse.ArgumentTypeError("a Standard Webhooks secret is whsec_ followed by base64")


async def run(args: argparse.Namespace) -> None:
    """Run the listener until Ctrl-C; exit 1 when the gateway refuses, 2 when it cannot be reached."""
    settings = client_settings()
    where = settings.gateway(args.url)
    token = args.token or (settings.runtime_token.get_secret_value() if settings.runtime_token else None)
    if not token:
        fail("no runtime token: pass --token or set HOOKGATE_RUNTIME_TOKEN (a pull agent's hgr_ token)")
    headers = {"Authorization": f"Bearer {token}", "User-Agent": "hookgate-listen"}
    with exit_on_failure(where):
        async with httpx.AsyncClient(base_url=where.url, headers=headers, timeout=30) as gateway, \
                httpx.AsyncClient() as local:
            listener = Listener(Client(gateway), local, args.forward_to, args.secret or new_signing_secret(),
                                args.instance, args.timeout, args.json)
            await listener.start()
            with _signals(listener.stopping):
                await listener.serve()


@contextlib.contextmanager
def _signals(stopping: Stopping) -> Any:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.signal)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def add_command(sub: Any) -> None:
    """Add ``hookgate listen``."""
    text = "run a pull agent's tasks against a local URL (the developer loop of `stripe listen`)"
    p = sub.add_parser("listen", help=text, description=text + ". Each task is POSTed to --forward-to, signed "
                       "with Standard Webhooks; the answer is the task's report (2xx succeeded; 408, 429, 5xx, "
                       "timeouts and refused connections retried; other answers failed). Ctrl-C stops claiming and "
                       "lets the current task finish; a second Ctrl-C gives it back.",
                       epilog="env HOOKGATE_URL (default http://HOOKGATE_HOST:HOOKGATE_PORT) / "
                              "HOOKGATE_RUNTIME_TOKEN supply --url / --token")
    p.add_argument("--forward-to", required=True, type=_local_url, metavar="URL",
                   help="where each task is POSTed, e.g. http://localhost:3000/hooks/agent")
    p.add_argument("--token", help="the pull agent's runtime token hgr_… (env HOOKGATE_RUNTIME_TOKEN)")
    p.add_argument("--url", help="gateway base URL (env HOOKGATE_URL; default: the serve of this directory's "
                                 ".hookgate/cli.json, else http://HOOKGATE_HOST:HOOKGATE_PORT)")
    p.add_argument("--secret", type=_whsec, help="whsec_… secret to sign with (default: a new one, printed at start)")
    p.add_argument("--instance", default=f"listen@{socket.gethostname()}",
                   help="runtime instance name (default listen@<hostname>)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds the local app has to answer (default 30)")
    p.add_argument("--json", action="store_true", help="one JSON object per task instead of a line of text")
    p.set_defaults(operations=("runtime_heartbeat", "runtime_claim", "runtime_renew", "runtime_report"))
