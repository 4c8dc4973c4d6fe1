r"""The issue's yardstick for dispatch, rebuilt and measured on this machine: Starlette + Procrastinate.

"Verify, enqueue, worker POSTs it on": a bare Starlette receiver looks the token up by digest, checks the
GitHub-style HMAC over the raw body, inserts a dedupe row and defers a Procrastinate job; Procrastinate
workers (separate processes, LISTEN/NOTIFY on) POST each job on to the same minimal agent as
``bench/dispatch.py`` (``bench/agent.py``), Standard-Webhooks-signed like Hookgate's pushes. Run it next to
``bench/dispatch.py`` with the same arguments and compare the two outputs:

    pip install procrastinate                    # not a dependency of Hookgate: this bench only
    HOOKGATE_BENCH_SERVER_URL=postgresql://postgres@127.0.0.1:5432/postgres \
        python bench/procrastinate_compare.py --runs 5000 --workers 2 --rate 200 --seconds 10

Phases (same as ``bench/dispatch.py``): (1) drain: ``--runs`` jobs deferred in one batch, the workers
drain them (jobs/s until the agent has them all); (2) latency: one job deferred every ``1/--rate`` s,
deferral -> agent receipt; (3) end to end: ``POST /hooks/{token}`` every ``1/--rate`` s through the
receiver, POST -> agent receipt. It prints JSON with the field names of ``bench/dispatch.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]  # the project, and bench/'s helpers

DB = f"hookgate_bench_procrastinate_{os.getpid()}"  # its own scratch database: two benches can run side by side
TOKEN = "awt_bench_procrastinate_token"
SECRET = "bench-signing-secret"
AGENT_SECRET = b"bench-agent-secret"


def make_app(dsn: str) -> Any:
    import procrastinate

    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))


# -- worker process ------------------------------------------------------------------------------------


def run_worker(dsn: str, agent_port: int, concurrency: int) -> None:
    import base64

    import aiohttp

    app = make_app(dsn)
    state: dict[str, aiohttp.ClientSession] = {}

    @app.task(name="push")
    async def push(t0: float | None = None, n: int = 0) -> None:
        session = state.get("http")
        if session is None:
            session = state["http"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
        body = json.dumps({"payload": {"payload": {"t0": t0, "n": n}}}).encode()
        msg_id, stamp = f"msg_{n}_{t0}", str(int(time.time()))
        sig = base64.b64encode(hmac.new(AGENT_SECRET, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest())
        headers = {"content-type": "application/json", "webhook-id": msg_id, "webhook-timestamp": stamp,
                   "webhook-signature": f"v1,{sig.decode()}"}
        async with session.post(f"http://127.0.0.1:{agent_port}/agent", data=body, headers=headers) as r:
            await r.read()
            if r.status >= 300:
                raise RuntimeError(f"agent answered {r.status}")

    async def main() -> None:
        async with app.open_async():
            try:
                await app.run_worker_async(concurrency=concurrency, listen_notify=True, delete_jobs="never")
            finally:
                if "http" in state:
                    await state["http"].close()

    asyncio.run(main())


# -- receiver process ----------------------------------------------------------------------------------


def run_receiver(dsn: str, port: int) -> None:
    import asyncpg
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    app = make_app(dsn)
    push = app.configure_task("push")  # deferred by name; the workers run it
    state: dict[str, Any] = {}

    async def receive(request: Request) -> JSONResponse:
        digest = hashlib.sha256(request.path_params["token"].encode()).digest()
        pool: asyncpg.Pool = state["pool"]
        secret = await pool.fetchval("SELECT secret FROM bench_trigger WHERE digest = $1", digest)
        if secret is None:
            return JSONResponse({"error": "not_found"}, status_code=404)
        raw = await request.body()
        want = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, request.headers.get("x-hub-signature-256", "")):
            return JSONResponse({"error": "invalid_signature"}, status_code=401)
        payload = json.loads(raw)
        key = request.headers.get("x-github-delivery", "")
        fresh = await pool.fetchval("INSERT INTO bench_delivery (dedupe_key, body) VALUES ($1, $2) "
                                    "ON CONFLICT DO NOTHING RETURNING true", key, raw)
        if not fresh:
            return JSONResponse({"status": "duplicate"})
        await push.defer_async(t0=payload.get("t0"), n=payload.get("n", 0))
        return JSONResponse({"status": "accepted"})

    async def main() -> None:
        state["pool"] = await asyncpg.create_pool(dsn, min_size=2, max_size=20)
        async with app.open_async():
            web = Starlette(routes=[Route("/hooks/{token}", receive, methods=["POST"])])
            config = uvicorn.Config(web, host="127.0.0.1", port=port, lifespan="off", access_log=False,
                                    log_config=None, server_header=False)
            await uvicorn.Server(config).serve()

    asyncio.run(main())


# -- the bench -----------------------------------------------------------------------------------------


async def prepare(server: str) -> str:
    import asyncpg

    from tests import databases

    dsn = await databases.create(server, DB)
    app = make_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    conn = await asyncpg.connect(dsn)
    await conn.execute("CREATE TABLE bench_trigger (digest bytea PRIMARY KEY, secret text NOT NULL)")
    await conn.execute("CREATE TABLE bench_delivery (dedupe_key text PRIMARY KEY, body bytea NOT NULL, "
                       "received_at timestamptz NOT NULL DEFAULT now())")
    await conn.execute("INSERT INTO bench_trigger VALUES ($1, $2)", hashlib.sha256(TOKEN.encode()).digest(), SECRET)
    await conn.close()
    return dsn


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


async def _agent_count(http: Any, port: int) -> int:
    async with http.get(f"http://127.0.0.1:{port}/stats") as r:
        return int((await r.json())["count"])


async def _wait_count(http: Any, port: int, total: int, timeout: float = 600) -> float:
    deadline = time.perf_counter() + timeout
    while (count := await _agent_count(http, port)) < total:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {count}/{total} jobs reached the agent")
        await asyncio.sleep(0.02)
    return time.perf_counter()


async def _wait_listening(http: Any, url: str) -> None:
    import aiohttp

    for _ in range(200):
        try:
            async with http.post(url, data=b"{}") as r:
                await r.read()
                return
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)
    raise TimeoutError(f"{url} is not answering")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp
    from figures import cpu_seconds, percentile  # the same percentile and /proc CPU as bench/dispatch.py

    from tests.processes import free_port, stop_all

    dsn = await prepare(args.server)
    agent_port, receiver_port = free_port(), free_port()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "bench" / "agent.py"), str(agent_port)])]
    try:
        app = make_app(dsn)
        push = app.configure_task("push")
        async with aiohttp.ClientSession() as http, app.open_async():
            await _wait_listening(http, f"http://127.0.0.1:{agent_port}/stats")
            await http.delete(f"http://127.0.0.1:{agent_port}/stats")
            workers = [_spawn("--role", "worker", "--dsn", dsn, "--agent-port", str(agent_port),
                              "--concurrency", str(args.concurrency)) for _ in range(args.workers)]
            procs += workers
            receiver = _spawn("--role", "receiver", "--dsn", dsn, "--port", str(receiver_port))
            procs.append(receiver)
            await _wait_listening(http, f"http://127.0.0.1:{receiver_port}/hooks/none")
            await asyncio.sleep(1.0)  # the workers' LISTEN connections
            # (1) drain
            await push.batch_defer_async(*({"n": i} for i in range(args.runs)))
            start, cpu0 = time.perf_counter(), cpu_seconds([w.pid for w in workers])
            end = await _wait_count(http, agent_port, args.runs)
            drain, drain_cpu = args.runs / (end - start), cpu_seconds([w.pid for w in workers]) - cpu0
            await http.delete(f"http://127.0.0.1:{agent_port}/stats")
            # (2) defer -> agent
            count = int(args.rate * args.seconds)
            t_start = time.perf_counter()
            for i in range(count):
                delay = t_start + i / args.rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await push.defer_async(t0=time.time(), n=i)
            await _wait_count(http, agent_port, count)
            async with http.get(f"http://127.0.0.1:{agent_port}/stats") as r:
                lat = (await r.json())["latencies_ms"]
            await http.delete(f"http://127.0.0.1:{agent_port}/stats")
            # (3) POST -> agent
            t_start = time.perf_counter()
            for i in range(count):
                delay = t_start + i / args.rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                raw = json.dumps({"event": "bench", "n": i, "t0": time.time()}).encode()
                sig = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
                headers = {"content-type": "application/json", "x-github-delivery": f"e2e-{i}",
                           "x-hub-signature-256": sig}
                async with http.post(f"http://127.0.0.1:{receiver_port}/hooks/{TOKEN}", data=raw,
                                     headers=headers) as r:
                    if r.status != 200:
                        raise RuntimeError(f"receiver answered {r.status}: {await r.text()}")
                    await r.read()
            await _wait_count(http, agent_port, count)
            async with http.get(f"http://127.0.0.1:{agent_port}/stats") as r:
                e2e = (await r.json())["latencies_ms"]
        return {
            "subject": "starlette + procrastinate", "drain_jobs_per_s": round(drain), "drain_jobs": args.runs,
            "workers": args.workers, "concurrency": args.concurrency,
            "drain_worker_cpu_ms_per_job": round(drain_cpu * 1000 / args.runs, 3),
            "latency_rate_per_s": args.rate, "latency_samples": len(lat),
            "latency_p50_ms": round(statistics.median(lat), 2), "latency_p99_ms": round(percentile(lat, 0.99), 2),
            "e2e_post_to_agent_samples": len(e2e), "e2e_p50_ms": round(statistics.median(e2e), 2),
            "e2e_p99_ms": round(percentile(e2e, 0.99), 2), "e2e_max_ms": round(max(e2e), 2),
        }
    finally:
        stop_all(procs, 15)
        from tests import databases

        await databases.drop(args.server, DB)  # its own scratch database, named after this process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=["bench", "worker", "receiver"], default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--agent-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server", default=os.environ.get("HOOKGATE_BENCH_SERVER_URL",
                                                           "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--runs", type=int, default=20000, help="backlog size for the drain phase")
    parser.add_argument("--workers", type=int, default=2, help="Procrastinate worker processes")
    parser.add_argument("--concurrency", type=int, default=8, help="jobs in flight per worker process")
    parser.add_argument("--rate", type=float, default=200.0, help="steady arrivals per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each latency phase")
    args = parser.parse_args()
    if args.role == "worker":
        run_worker(args.dsn, args.agent_port, args.concurrency)
    elif args.role == "receiver":
        run_receiver(args.dsn, args.port)
    else:
        result = asyncio.run(bench(args))
        print(json.dumps(result, indent=2))
        # bench/run_all's peer column, beside bench/dispatch.py's rows of the same subject.
        peer = "Starlette + Procrastinate"
        print("PEER " + json.dumps({"subject": "drain, default settings",
                                    "peer": f"{peer}: {result['drain_jobs_per_s']} jobs/s"}))
        print("PEER " + json.dumps({"subject": f"POST -> agent at {args.rate:.0f}/s",
                                    "peer": f"{peer}: p50 {result['e2e_p50_ms']:.2f} / p99 "
                                            f"{result['e2e_p99_ms']:.2f} ms"}))


if __name__ == "__main__":
    main()
