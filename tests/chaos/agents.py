"""The agents of a chaos run: an HTTP agent that misbehaves on purpose and pull runtimes that vanish mid-lease.

Both record what they were given, so the checks can compare it with the database: every push with its
``webhook-id`` (the task id) and run id, every report the runtime API applied.
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

import httpx
from aiohttp import web


@dataclass
class HttpAgent:
    """A local HTTP agent: 200 mostly, sometimes 500, 429 + Retry-After, or a slow 200 (under its timeout)."""

    secret: str = ""
    slow_s: float = 1.0
    rng: random.Random = field(default_factory=random.Random)
    acked: Counter[str] = field(default_factory=Counter)  # task id -> 2xx answers given
    runs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # run id -> task ids pushed
    pushes: int = 0
    bad_signatures: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen on a free loopback port; returns the URL to register."""
        app = web.Application()
        app.router.add_post("/", self._push)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}/"

    async def stop(self) -> None:
        """Close the server."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _push(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.pushes += 1
        if not self._signed(request.headers, raw):
            self.bad_signatures += 1
        task_id = request.headers.get("webhook-id", "")
        self.runs[json.loads(raw)["run_id"]].add(task_id)
        roll = self.rng.random()
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
