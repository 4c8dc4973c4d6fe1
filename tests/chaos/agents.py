"""The agents of a chaos run: an HTTP agent that misbehaves on purpose and pull runtimes that vanish mid-lease.

Both record what they were given, so the checks can compare it with the database: every push with its
``webhook-id`` (the task id) and run id, every report the runtime API applied. The HTTP agent can also be
down for a while (:meth:`HttpAgent.outage`): its port refuses connections, or it answers every push 503,
until :meth:`HttpAgent.recover` brings it back on the same URL.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import random
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Literal

import httpx
from aiohttp import web

#: How a down agent looks from outside: its port refuses connections, or it answers every push 503.
Outage = Literal["refused", "503"]


@dataclass
class HttpAgent:
    """A local HTTP agent: 200 mostly, sometimes 500, 429 + Retry-After, or a slow 200 (under its timeout)."""

    secret: str = ""
    slow_s: float = 1.0
    misbehave: bool = True  # False: every push is answered 200 at once (the failover run's agent)
    rng: random.Random = field(default_factory=random.Random)
    acked: Counter[str] = field(default_factory=Counter)  # task id -> 2xx answers given
    runs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # run id -> task ids pushed
    pushes: int = 0
    bad_signatures: int = 0
    down: Outage | None = None
    answered_503: int = 0  # pushes answered 503 while down
    _runner: web.AppRunner | None = None
    _site: web.TCPSite | None = None
    _port: int = 0

    async def start(self) -> str:
        """Listen on a free loopback port; returns the URL to register."""
        app = web.Application()
        app.router.add_post("/", self._push)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await self._listen()
        return f"http://127.0.0.1:{self._port}/"

    async def _listen(self) -> None:
        """Open the listening socket (the same port again after a refusing outage)."""
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self._port, reuse_address=True)
        await self._site.start()
        self._port = self._site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def outage(self, mode: Outage) -> None:
        """Go down: ``refused`` closes the port and every open connection, ``503`` answers every push 503."""
        assert self._runner is not None
        self.down = mode
        if mode == "refused" and self._site is not None:
            await self._site.stop()
            self._site = None
            # Kept-alive connections would still carry pushes: close them (a push in flight is cut).
            await self._runner.server.shutdown(0.01)  # type: ignore[union-attr]
        elif mode == "503" and self._site is None:
            await self._listen()

    async def recover(self) -> None:
        """Come back on the same URL and answer as before."""
        if self._site is None:
            await self._listen()
        self.down = None

    async def stop(self) -> None:
        """Close the server."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _push(self, request: web.Request) -> web.StreamResponse:
        if self.down == "refused":  # a connection accepted just before the port closed
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)
        raw = await request.read()
        self.pushes += 1
        if not self._signed(request.headers, raw):
            self.bad_signatures += 1
        task_id = request.headers.get("webhook-id", "")
        self.runs[json.loads(raw)["run_id"]].add(task_id)
        if self.down == "503":
            self.answered_503 += 1
            return web.json_response({"error": "down for maintenance"}, status=503)
        roll = self.rng.random() if self.misbehave else 1.0
        if roll < 0.08:
            return web.json_response({"error": "boom"}, status=500)
        if roll < 0.14:
            return web.json_response({"error": "busy"}, status=429, headers={"Retry-After": "1"})
        if roll < 0.24:
            await asyncio.sleep(self.rng.uniform(0.1, self.slow_s))
        self.acked[task_id] += 1
        return web.json_response({"ok": True})

    def _signed(self, headers: object, raw: bytes) -> bool:
        get = headers.get  # type: ignore[attr-defined]
        key = base64.b64decode(self.secret.removeprefix("whsec_"))
        message = f"{get('webhook-id')}.{get('webhook-timestamp')}.".encode() + raw
        expected = base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()
        return any(sig == f"v1,{expected}" for sig in str(get("webhook-signature", "")).split())


@dataclass
class PullRuntimes:
    """``count`` pull runtimes of one agent: claim, work briefly, report; some vanish while holding a lease."""

    base_urls: list[str]
    token: str
    count: int = 6
    vanish: float = 0.1
    rng: random.Random = field(default_factory=random.Random)
    applied: Counter[str] = field(default_factory=Counter)  # task id -> reports applied
    claims: int = 0
    vanished: int = 0
    stopping: bool = False
    #: Set once a claim has been answered: its instance heartbeated, so the pull agent's runtime is ready.
    online: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        """Run every runtime until ``stopping``."""
        async with httpx.AsyncClient(timeout=15, headers={"authorization": f"Bearer {self.token}"}) as client:
            await asyncio.gather(*(self._runtime(client, i) for i in range(self.count)))

    async def _runtime(self, client: httpx.AsyncClient, index: int) -> None:
        # A claim heartbeats its instance too, so a runtime that only claims stays online.
        instance = f"rt{index}-{uuid.uuid4().hex[:6]}"
        while not self.stopping:
            base = self.rng.choice(self.base_urls)
            try:
                answer = await client.post(f"{base}/v1/runtime/claim", json={"wait_s": 1, "instance": instance})
                if answer.status_code in (200, 204):
                    self.online.set()
                if answer.status_code != 200:
                    await asyncio.sleep(0.2 if answer.status_code == 204 else 0.5)
                    continue
                self.claims += 1
                if self.rng.random() < self.vanish:  # gone mid-lease: the watchdog must give the task back
                    self.vanished += 1
                    instance = f"rt{index}-{uuid.uuid4().hex[:6]}"
                    continue
                await self._report(client, base, answer.json())
            except httpx.HTTPError:
                await asyncio.sleep(0.5)

    async def _report(self, client: httpx.AsyncClient, base: str, claimed: dict[str, object]) -> None:
        task = claimed["task"]
        assert isinstance(task, dict)
        await asyncio.sleep(self.rng.uniform(0, 0.2))
        body = {"lease_token": claimed["lease_token"], "status": "succeeded", "result": {"by": "chaos"}}
        for _ in range(20):  # a report answered 503 is repeated, as a runtime would
            answer = await client.post(f"{base}/v1/runtime/tasks/{task['id']}/report", json=body)
            if answer.status_code == 200:
                if answer.json().get("applied"):
                    self.applied[str(task["id"])] += 1
                return
            if answer.status_code != 503:
                return
            await asyncio.sleep(0.5)
