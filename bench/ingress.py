"""Ingress benchmark: signed 1 KiB GitHub-style deliveries against ``hookgate gateway``.

One command, from the repository root:

    python bench/ingress.py                 # 2 alternating rounds of 10 s per server, 64 connections
    python bench/ingress.py --duration 20 --profile      # also py-spy the gateway (pip install py-spy)
    python bench/ingress.py --workers 2     # also ``gateway --workers 2``: the scaling over one process
    python bench/ingress.py --schemes       # also a custom HMAC trigger (with a payload filter) and an Ed25519 one
    python bench/ingress.py --loop asyncio  # both servers on the standard library's event loop

It uses ``HOOKGATE_DATABASE_URL`` as the server (default ``postgresql://postgres@127.0.0.1:5432/postgres``),
creates a scratch database there and drops it afterwards. It starts, as real subprocesses under the same
uvicorn settings (httptools, no access log) and the same event loop (``--loop``, default uvloop):

- the baseline: a bare Starlette app doing one asyncpg ``INSERT`` of the body per request, answering 200;
- the real ``hookgate gateway`` CLI with one webhook trigger (provider ``github``, a signing secret, an
  autopilot assigned to an HTTP agent, so every delivery is queued with a ``pending`` run);
- with ``--schemes``, the same one-process gateway also on a ``custom`` trigger of a timestamped HMAC scheme
  with its own event and dedupe sources and a payload filter of five tests that every request passes, so
  each is evaluated in full (``hmac``), and on one of an Ed25519 scheme as Discord signs
  (``ed25519``): each printed with its rate over the GitHub trigger's of the same round;
- with ``--workers N`` (N > 1), also ``hookgate gateway --workers N`` over the same trigger, labelled
  ``gatewayN``: its figures are printed beside the one-process gateway's of the same run, with the
  scaling (its rate over the one-process rate), the CPU of all its processes, and how the connections
  were split over its processes (sampled in the middle of each measured window).

A lean raw-asyncio HTTP/1.1 keep-alive client (requests prebuilt, so the client is not the bottleneck)
drives each server for ``--duration`` seconds after a short warm-up, prints accepted req/s, p50 and p99
latency for both and the ratio, then checks the database: every 2xx is a stored delivery, no dedupe key
is stored twice, every delivery has exactly one run. The per-IP caps are raised for the run (all load
comes from 127.0.0.1). The client runs on the same machine: its own CPU per request is printed too, and
the load average at the start and the end (other work on the machine changes every figure). "server busy"
is the server's CPU time over the window's length: how many cores its processes kept busy.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: E402
from figures import cpu_seconds, percentile  # noqa: E402  (bench/, this script's folder)

from tests.processes import free_port, stop_all  # noqa: E402

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
SECRET = "bench-signing-secret"
SECRET_KEY = base64.b64encode(b"b" * 32).decode()
BASELINE_TABLE = "CREATE TABLE IF NOT EXISTS bench_baseline (id bigserial PRIMARY KEY, body bytea NOT NULL)"


# -- the baseline server (run as a subprocess of this script) ------------------------------------------


def serve_baseline(dsn: str, port: int, pool_max: int, loop: str) -> None:
    """Bare Starlette + one asyncpg INSERT per request, under the gateway's uvicorn settings and event loop."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    state: dict[str, asyncpg.Pool] = {}

    async def receive(request: Request) -> JSONResponse:
        body = await request.body()
        await state["pool"].execute("INSERT INTO bench_baseline (body) VALUES ($1)", body)
        return JSONResponse({"status": "accepted"})

    async def main() -> None:
        state["pool"] = await asyncpg.create_pool(dsn, min_size=2, max_size=pool_max)
        app = Starlette(routes=[Route("/hooks/{token:path}", receive, methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", access_log=False,
                                log_config=None, server_header=False, timeout_keep_alive=5)
        await uvicorn.Server(config).serve()

    from hookgate.cli import run_loop

    run_loop(loop, main())  # the same event loop as `hookgate gateway` (hookgate/cli.py)


# -- setup ---------------------------------------------------------------------------------------------


#: The custom HMAC subject's scheme (--schemes): Stripe-like, timestamped, with its own sources.
CUSTOM_HMAC = {"kind": "hmac", "header": "X-Signature", "prefix": "sha256=", "signed": "{timestamp}.{body}",
               "timestamp_header": "X-Timestamp"}
#: The custom HMAC subject's payload filter (--schemes): every test runs on every request (all of them match).
PAYLOAD_FILTER = {"and": [{"path": "/action", "in": ["opened", "edited", "reopened"]},
                          {"path": "/issue/number", "gte": 1}, {"path": "/issue/title", "prefix": "Found"},
                          {"not": {"path": "/issue/user/login", "in": ["dependabot[bot]", "renovate[bot]"]}},
                          {"path": "/issue/user/id", "exists": True}]}
#: The Ed25519 subject's scheme (--schemes): Discord's.
ED25519 = {"kind": "public_key", "algorithm": "ed25519", "header": "X-Signature-Ed25519", "encoding": "hex",
           "timestamp_header": "X-Signature-Timestamp", "signed": "{timestamp}{body}"}


@dataclass
class Prepared:
    """The scratch database, the token of each subject's trigger, and the Ed25519 sender's private key."""

    dsn: str
    tokens: dict[str, str]
    ed25519_key: Any


async def prepare(server: str, name: str) -> Prepared:
    """Create and migrate the scratch database and the webhook triggers: github, custom HMAC and Ed25519."""
    from autopilot import agents, rules, workspaces
    from gateway import schemes
    from hookgate import database
    from hookgate.context import open_context
    from hookgate.settings import Settings
    from tests import databases

    dsn = await databases.create(server, name, migrated=True)
    conn = await database.connect(dsn)
    await conn.execute(BASELINE_TABLE)
    await conn.close()
    settings = Settings(database_url=dsn, secret_key=SECRET_KEY)  # type: ignore[arg-type]
    async with open_context(settings, migrate=False) as ctx, ctx.pool.acquire() as c:
        boot = await workspaces.bootstrap(c, "bench")
        agent = await agents.create_http_agent(c, ctx.keyring, workspace_id=boot.workspace_id,
                                               owner_id=boot.member_id, name="agent", url="http://127.0.0.1:9/")
        ap, _ = await rules.create_autopilot(c, workspace_id=boot.workspace_id, creator_id=boot.member_id,
                                             title="bench", assignee_type="agent", assignee_id=agent.row["id"],
                                             execution_mode="run_only")
        publisher = rules.Publisher.member(boot.member_id)
        trigger, token = await rules.create_webhook_trigger(
            c, ctx.keyring, autopilot=ap, publisher=publisher, provider="github")
        await rules.set_signing_secret(c, ctx.keyring, trigger["id"], SECRET)
        custom, custom_token = await rules.create_webhook_trigger(
            c, ctx.keyring, autopilot=ap, publisher=publisher, provider="custom", signature_scheme=CUSTOM_HMAC,
            dedupe_key_source="header:x-request-id", event_source="json:/action", payload_filter=PAYLOAD_FILTER)
        await rules.set_signing_secret(c, ctx.keyring, custom["id"], SECRET)
        key = ed25519.Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
        signed, signed_token = await rules.create_webhook_trigger(
            c, ctx.keyring, autopilot=ap, publisher=publisher, provider="custom", signature_scheme=ED25519,
            dedupe_key_source="header:x-request-id", event_source="json:/action")
        await rules.set_signing_secret(c, ctx.keyring, signed["id"], schemes.public_key_text(public, "ed25519"))
    return Prepared(dsn, {"github": token, "hmac": custom_token, "ed25519": signed_token}, key)


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited early with {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit("server did not start listening")


# -- the load --------------------------------------------------------------------------------------------


@dataclass
class Request:
    """One prebuilt HTTP request and its dedupe key."""

    key: str
    data: bytes


def build_requests(path: str, count: int, kind: str = "github", key: Any = None) -> list[Request]:
    """Signed 1 KiB ``issues`` deliveries, each with its own dedupe key.

    Signed as GitHub signs them (``github``), as the custom HMAC scheme does (``hmac``), or with the Ed25519
    ``key`` (``ed25519``).
    """
    out, now = [], str(int(time.time()))
    for _ in range(count):
        dedupe = str(uuid.uuid4())
        issue = {"number": 1347, "title": "Found a bug", "user": {"login": "octocat", "id": 1}}
        body = {"action": "opened", "delivery": dedupe, "issue": issue, "padding": ""}
        raw = json.dumps(body, separators=(",", ":")).encode()
        body["padding"] = "x" * (1024 - len(raw))
        raw = json.dumps(body, separators=(",", ":")).encode()
        if kind == "github":
            sig = hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
            signature = (f"User-Agent: GitHub-Hookshot/bench\r\nX-GitHub-Event: issues\r\n"
                         f"X-GitHub-Delivery: {dedupe}\r\nX-Hub-Signature-256: sha256={sig}")
        elif kind == "hmac":
            sig = hmac.new(SECRET.encode(), f"{now}.".encode() + raw, hashlib.sha256).hexdigest()
            signature = f"X-Request-Id: {dedupe}\r\nX-Timestamp: {now}\r\nX-Signature: sha256={sig}"
        else:
            sig = key.sign(now.encode() + raw).hex()
            signature = f"X-Request-Id: {dedupe}\r\nX-Signature-Timestamp: {now}\r\nX-Signature-Ed25519: {sig}"
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"{signature}\r\nContent-Length: {len(raw)}\r\n\r\n")
        out.append(Request(dedupe, head.encode() + raw))
    return out


@dataclass
class Result:
    """What one server answered: the keys of its 2xx, latencies, status counts, elapsed seconds."""

    ok_keys: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    elapsed: float = 0.0
    cpu_us: float = 0.0  # the server process's CPU time over the measured windows, in microseconds
    db_cpu_us: float = 0.0  # the same for the PostgreSQL backends of the bench database
    client_cpu_us: float = 0.0  # this client's own CPU time over the measured windows
    splits: list[list[int]] = field(default_factory=list)  # connections per gateway process, sampled per window

    @property
    def rate(self) -> float:
        """Accepted (2xx) requests per second."""
        return len(self.ok_keys) / self.elapsed if self.elapsed else 0.0

    def p(self, q: float) -> float:
        """Latency percentile ``q`` in milliseconds."""
        return percentile(self.latencies, q) * 1000

    def merge(self, other: Result) -> None:
        """Add another round's figures."""
        self.ok_keys += other.ok_keys
        self.latencies += other.latencies
        self.elapsed += other.elapsed
        self.cpu_us += other.cpu_us
        self.db_cpu_us += other.db_cpu_us
        self.client_cpu_us += other.client_cpu_us
        self.splits += other.splits
        for status, n in other.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + n


async def _connection(port: int, requests: list[Request], cursor: list[int], stop: float,
                      result: Result | None) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    clock = time.perf_counter
    try:
        while clock() < stop and cursor[0] < len(requests):
            req = requests[cursor[0]]
            cursor[0] += 1
            started = clock()
            writer.write(req.data)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            at = head.lower().find(b"content-length:")
            length = int(head[at + 15 : head.index(b"\r\n", at)]) if at >= 0 else 0
            await reader.readexactly(length)
            if result is not None:
                result.latencies.append(clock() - started)
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if 200 <= status < 300:
                    result.ok_keys.append(req.key)
    finally:
        writer.close()


async def drive(port: int, requests: list[Request], connections: int, seconds: float,
                result: Result | None) -> float:
    """Keep ``connections`` keep-alive connections busy for ``seconds``; returns the elapsed time."""
    cursor = [0]
    started = time.perf_counter()
    stop = started + seconds
    await asyncio.gather(*(_connection(port, requests, cursor, stop, result) for _ in range(connections)))
    del requests[: cursor[0]]
    return time.perf_counter() - started


async def wal_lsn(dsn: str) -> int:
    """The server's current WAL position in bytes (WAL is server-wide: use a private server for exact figures)."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))
    finally:
        await conn.close()


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc``): a gateway with ``--workers`` is a supervisor and its children."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except OSError:
                pass
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds so far of ``pid`` and its live descendants."""
    return cpu_seconds(tree(pid))


def connection_split(pid: int, port: int) -> list[int]:
    """Established connections on ``port`` held by each child of ``pid``, largest first (psutil reads /proc)."""
    import psutil

    counts = []
    for child in psutil.Process(pid).children():
        try:
            held = child.net_connections(kind="tcp")
        except psutil.Error:
            continue
        counts.append(sum(1 for c in held if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port))
    return sorted(counts, reverse=True)


async def sample_split(after: float, pid: int, port: int, result: Result) -> None:
    """After ``after`` seconds, record how the open connections are split over the gateway processes."""
    await asyncio.sleep(after)
    result.splits.append(await asyncio.to_thread(connection_split, pid, port))


async def database_cpu(dsn: str) -> float:
    """CPU seconds so far of the PostgreSQL backends serving the bench database (a server on this host)."""
    conn = await asyncpg.connect(dsn)
    try:
        pids = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    finally:
        await conn.close()
    return cpu_seconds(row["pid"] for row in pids)


async def measure(label: str, port: int, path: str, args: argparse.Namespace, dsn: str,
                  pid: int, processes: int = 1, kind: str = "github", key: Any = None) -> tuple[Result, float]:
    requests = build_requests(path, int((args.duration + args.warmup) * args.max_rate), kind, key)
    await drive(port, requests, args.connections, args.warmup, None)
    result = Result()
    before, cpu_before, db_before = await wal_lsn(dsn), tree_cpu_seconds(pid), await database_cpu(dsn)
    client_before = time.process_time()
    split = None
    if processes > 1:  # which process holds which connection, once they are all open (in a thread: /proc is slow)
        split = asyncio.create_task(sample_split(args.duration / 2, pid, port, result))
    result.elapsed = await drive(port, requests, args.connections, args.duration, result)
    if split is not None:
        await split
    answered = max(1, sum(result.statuses.values()))
    client_cpu = (time.process_time() - client_before) / answered * 1e6
    cpu = (tree_cpu_seconds(pid) - cpu_before) / answered * 1e6
    db_cpu = (await database_cpu(dsn) - db_before) / answered * 1e6
    result.cpu_us += cpu * answered
    result.db_cpu_us += db_cpu * answered
    result.client_cpu_us += client_cpu * answered
    wal = (await wal_lsn(dsn) - before) / answered
    rate = result.rate
    shares = f"   connections per process {'/'.join(map(str, result.splits[-1]))}" if result.splits else ""
    print(f"{label:9s} {rate:8.0f} req/s accepted   p50 {percentile(result.latencies, 0.5) * 1000:6.2f} ms   "
          f"p99 {percentile(result.latencies, 0.99) * 1000:6.2f} ms   "
          f"CPU server {cpu:4.0f} + PostgreSQL {db_cpu:4.0f} + client {client_cpu:3.0f} us/req   "
          f"server busy {sum(result.statuses.values()) * cpu / 1e6 / result.elapsed:4.2f} cores   "
          f"WAL {wal:6.0f} B/req   statuses {result.statuses}{shares}", flush=True)
    if not requests:
        print(f"  warning: {label} ran out of prebuilt requests; raise --max-rate", flush=True)
    return result, rate


async def check(dsn: str, gateway: Result, baseline: Result) -> bool:
    """Every 2xx of the gateways (``gateway`` holds the keys of all of them) is stored once, with its run."""
    conn = await asyncpg.connect(dsn)
    try:
        stored = await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE dedupe_key = ANY($1::text[])",
                                     gateway.ok_keys)
        dupes = await conn.fetchval("SELECT count(*) - count(DISTINCT dedupe_key) FROM webhook_delivery")
        orphans = await conn.fetchval(
            "SELECT count(*) FROM webhook_delivery d WHERE NOT EXISTS "
            "(SELECT 1 FROM autopilot_run r WHERE r.webhook_delivery_id = d.id)")
        base_rows = await conn.fetchval("SELECT count(*) FROM bench_baseline")
    finally:
        await conn.close()
    ok = stored == len(set(gateway.ok_keys)) == len(gateway.ok_keys) and dupes == 0 and orphans == 0
    print(f"db check: {stored}/{len(gateway.ok_keys)} gateway 2xx stored, {dupes} duplicate keys, "
          f"{orphans} deliveries without a run; baseline rows {base_rows} >= 2xx {len(baseline.ok_keys)}: "
          f"{'OK' if ok and base_rows >= len(baseline.ok_keys) else 'FAILED'}", flush=True)
    return ok and base_rows >= len(baseline.ok_keys)


def batch_sizes(port: int) -> tuple[float, float]:
    """The gateway's ``hookgate_ingress_batch_size`` so far: (requests written, statements)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
        text = page.read().decode()
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("hookgate_ingress_batch_size_sum", "hookgate_ingress_batch_size_count"):
            found[name] = float(value)
    return found.get("hookgate_ingress_batch_size_sum", 0.0), found.get("hookgate_ingress_batch_size_count", 0.0)


def start_profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found: pip install py-spy", flush=True)
        return None
    return subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200", "-f", "raw",
                             "-o", str(out), "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def summarize_profile(path: Path, top: int = 15) -> None:
    """Self time by function from py-spy's collapsed stacks, plus inclusive time of our own modules."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf = frames[-1]
        own[leaf] = own.get(leaf, 0) + n
        for frame in set(frames):
            if "gateway/" in frame or "sql/" in frame or "hookgate/" in frame:
                incl[frame] = incl.get(frame, 0) + n
    print(f"profile ({total} samples): top self time", flush=True)
    for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {100 * n / total:5.1f}%  {frame}")
    parents: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if len(frames) > 3:
            key = " <- ".join(f.split(" (")[0] for f in frames[-1:-5:-1])
            parents[key] = parents.get(key, 0) + int(count)
    print("top leaf call chains:")
    for chain, n in sorted(parents.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {100 * n / total:5.1f}%  {chain}")
    print("inclusive time in hookgate code:")
    for frame, n in sorted(incl.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {100 * n / total:5.1f}%  {frame}")


@dataclass
class Server:
    """One server under test: its process, port, webhook path, and what it answered so far."""

    label: str
    proc: subprocess.Popen[bytes]
    port: int
    path: str
    processes: int = 1
    total: Result = field(default_factory=Result)
    kind: str = "github"
    """How its requests are signed (see :func:`build_requests`)."""


async def run(args: argparse.Namespace) -> int:
    import uvloop  # noqa: F401  (the servers use it through uvicorn; so does this client)

    from tests import databases

    server = os.environ.get("HOOKGATE_DATABASE_URL", DEFAULT_SERVER)
    name = f"hookgate_bench_{os.getpid()}"
    prepared = await prepare(server, name)
    dsn, token = prepared.dsn, prepared.tokens["github"]
    procs: list[subprocess.Popen[bytes]] = []
    logs = Path(tempfile.mkdtemp(prefix="hookgate-bench-"))
    print(f"load     {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} CPUs at the "
          f"start", flush=True)
    ok = False
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HOOKGATE_DATABASE_URL": dsn, "HOOKGATE_SECRET_KEY": SECRET_KEY,
               "HOOKGATE_IP_REQUEST_CAP": "1000000000", "HOOKGATE_IP_BAD_CREDENTIAL_CAP": "1000000000",
               "HOOKGATE_MAX_CONNECTIONS_PER_IP": "1024",  # one loopback client: only the cap applies
               "HOOKGATE_POOL_MAX_SIZE": str(args.pool), "HOOKGATE_LOG_LEVEL": "warning",
               "HOOKGATE_EVENT_LOOP": args.loop}
        print(f"loop     {args.loop} (both servers)", flush=True)

        def gateway(label: str, workers: int) -> Server:
            port = free_port()
            proc = subprocess.Popen([sys.executable, "-m", "hookgate.cli", "gateway", "--port", str(port),
                                     "--workers", str(workers)], cwd=ROOT, env=env,
                                    stdout=(logs / f"{label}.log").open("wb"), stderr=subprocess.STDOUT)
            procs.append(proc)
            return Server(label, proc, port, f"/hooks/{token}", workers)

        base_port = free_port()
        base = subprocess.Popen([sys.executable, __file__, "--serve-baseline", dsn, str(base_port), str(args.pool),
                                 args.loop],
                                env=env, stdout=(logs / "baseline.log").open("wb"), stderr=subprocess.STDOUT)
        procs.append(base)
        servers = [Server("baseline", base, base_port, "/hooks/x"), gateway("gateway", 1)]
        if args.workers > 1:
            servers.append(gateway(f"gateway{args.workers}", args.workers))
        if args.schemes:  # the same one-process gateway, on the custom HMAC and Ed25519 triggers
            single = servers[1]
            servers += [Server(kind, single.proc, single.port, f"/hooks/{prepared.tokens[kind]}", kind=kind)
                        for kind in ("hmac", "ed25519")]
        for srv in servers:
            wait_listening(srv.port, srv.proc)
        for srv in servers[1:]:  # the port answers as soon as one process serves: "ready" means all of them
            if srv.kind != "github":
                continue
            deadline = time.monotonic() + 60
            while b"hookgate ready on" not in (logs / f"{srv.label}.log").read_bytes():
                if time.monotonic() > deadline or srv.proc.poll() is not None:
                    raise SystemExit(f"{srv.label} did not get ready")
                time.sleep(0.05)
        ratios: dict[str, list[float]] = {srv.label: [] for srv in servers[1:]}
        scaling: list[float] = []
        for round_no in range(args.rounds):
            # Rotate the order so a checkpoint or a noisy neighbour does not always hit the same server.
            order = servers[round_no % len(servers):] + servers[: round_no % len(servers)]
            rates = {}
            for srv in order:
                spy = None
                if srv.label == args.profile and round_no == 0:
                    spy = start_profile(srv.proc.pid, args.duration + args.warmup, logs / "server.prof")
                result, rates[srv.label] = await measure(srv.label, srv.port, srv.path, args, dsn, srv.proc.pid,
                                                         srv.processes, srv.kind, prepared.ed25519_key)
                srv.total.merge(result)
                if spy is not None:
                    spy.wait(60)
            for srv in servers[1:]:
                ratios[srv.label].append(rates[srv.label] / rates["baseline"])
                print(f"ratio    {ratios[srv.label][-1]:8.2f} ({srv.label} / baseline), round {round_no + 1}",
                      flush=True)
            for kind in ("hmac", "ed25519") if args.schemes else ():
                print(f"scheme   {rates[kind] / rates['gateway']:8.2f} ({kind} / gateway), round {round_no + 1}",
                      flush=True)
            if args.workers > 1:
                scaling.append(rates[servers[2].label] / rates["gateway"])
                print(f"scaling  {scaling[-1]:8.2f} ({servers[2].label} / gateway), round {round_no + 1}", flush=True)
        for srv in servers:
            res = srv.total
            answered = max(1, sum(res.statuses.values()))
            print(f"total    {srv.label:9s}{res.rate:8.0f} req/s  p50 {res.p(0.5):.2f} ms  p99 {res.p(0.99):.2f} ms  "
                  f"CPU server {res.cpu_us / answered:.0f} + PostgreSQL {res.db_cpu_us / answered:.0f} + client "
                  f"{res.client_cpu_us / answered:.0f} us/req  server busy {res.cpu_us / 1e6 / res.elapsed:.2f} cores",
                  flush=True)
        baseline, single = servers[0].total, servers[1].total
        median = sorted(ratios["gateway"])[len(ratios["gateway"]) // 2]
        print(f"summary  ratio {single.rate / baseline.rate:.2f} (median of rounds {median:.2f}); {args.connections} "
              f"connections, {args.rounds} x {args.duration:.0f} s per server, pool {args.pool} per process",
              flush=True)
        if args.workers > 1:
            multi = servers[2]
            splits = ", ".join("/".join(map(str, split)) for split in multi.total.splits)
            print(f"summary  scaling {multi.total.rate / single.rate:.2f} ({multi.label} / gateway, median of rounds "
                  f"{sorted(scaling)[len(scaling) // 2]:.2f}); {multi.label} / baseline "
                  f"{multi.total.rate / baseline.rate:.2f}; connections per process in each window: {splits}",
                  flush=True)
        for srv in servers:  # the rows of bench/run_all's table (each ratio against the baseline of this run)
            row = {"subject": srv.label, "value": round(srv.total.rate), "unit": "req/s",
                   "p50_ms": round(srv.total.p(0.5), 2), "p99_ms": round(srv.total.p(0.99), 2)}
            if srv is not servers[0]:
                row |= {"baseline": f"{baseline.rate:.0f} req/s ({servers[0].label})",
                        "ratio": round(srv.total.rate / baseline.rate, 2)}
            print(f"BENCH {json.dumps(row)}", flush=True)
        written, statements = batch_sizes(servers[1].port)
        print(f"batches  {written / max(statements, 1):.1f} deliveries per ingest statement on average "
              f"({statements:.0f} statements, the one-process gateway)", flush=True)
        print(f"load     {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) at the end", flush=True)
        if args.profile:
            summarize_profile(logs / "server.prof")
        gateways = Result()
        for srv in servers[1:]:
            gateways.merge(srv.total)
        ok = await check(dsn, gateways, baseline)
        return 0 if ok else 1
    finally:
        stop_all(procs, 10)
        await databases.drop(server, name)
        if ok:
            shutil.rmtree(logs, ignore_errors=True)
        else:
            print(f"server logs kept in {logs}", flush=True)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--serve-baseline":
        serve_baseline(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per server (default 10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first (default 2)")
    parser.add_argument("--connections", type=int, default=64, help="concurrent keep-alive connections (64)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per server (default 2)")
    parser.add_argument("--pool", type=int, default=20, help="database pool size of every server process (20)")
    parser.add_argument("--max-rate", type=float, default=8000, help="requests prebuilt per second (8000)")
    parser.add_argument("--profile", nargs="?", const="gateway", choices=["gateway", "baseline"],
                        help="py-spy one server (default the gateway) in round 1 and print where its time goes")
    parser.add_argument("--schemes", action="store_true",
                        help="also measure the gateway on a custom HMAC trigger with a payload filter and on an "
                        "Ed25519 one")
    parser.add_argument("--workers", type=int, default=1,
                        help="also measure `hookgate gateway --workers N` (N > 1) beside the one-process gateway")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop",
                        help="event loop of both servers (default uvloop, the gateway's own default)")
    import uvloop

    raise SystemExit(uvloop.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
