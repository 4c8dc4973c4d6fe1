"""Fuzz the admin and runtime APIs of a real ``hookgate gateway`` process with schemathesis.

One command (embedded PostgreSQL in a temp dir by default)::

    python bench/fuzz.py [--examples 300] [--server-url postgresql://…] [--seed 7]

The admin and runtime APIs are fuzzed from the gateway's own ``/openapi.json``: the admin operations with
the owner key, the runtime ones (tag ``runtime``) with a pull runtime token.
Checks: no 5xx, no stack trace, every error a JSON ``error`` code
(``bench/fuzz_checks.py``). Prints the number of requests sent (from schemathesis' HAR report); exits
non-zero on any failure. ``--examples 300`` (the default) sends over 10,000 requests. See docs/RELIABILITY.md.

Then ``--hostile N`` requests (default 3,000) hit the runtime API with what a schema does not generate:
bodies that are binary, deeply nested, over the size cap, of the wrong JSON shape or holding NaN/Infinity;
no, malformed, unknown or foreign bearers (an admin key, the pull token); a real HTTP agent task (no bearer,
random lease tokens), random and malformed task ids and paths; odd content types. Same checks, plus every
answer is JSON. ``--only runtime`` skips the admin API (a run of about two minutes with ``--examples 20``).

First, ``--hostile-ingress N`` requests (default 3,000) go to ``POST /hooks/{token}`` of triggers of every
signature scheme family and every data preset (``bench/fuzz_ingress.py``); ``--only ingress`` runs that alone.
Then ``--hostile-filters N`` requests (default 1,000) carry hostile payload filters to trigger create, edit and
filter-test (``bench/fuzz_filters.py``); ``--only filters`` runs that alone.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fuzz_filters import hostile_filters  # noqa: E402
from bench.fuzz_ingress import hostile_ingress, make_triggers  # noqa: E402
from tests.chaos import world  # noqa: E402
from tests.chaos.cluster import Cluster  # noqa: E402


def schemathesis(schema: str, base: str, token: str, examples: int, seed: int, work: Path, name: str,
                 *selection: str) -> int:
    """Run ``st run`` on the operations ``selection`` picks; the number of requests it sent (raises on failure)."""
    har = work / f"{name}.har"
    command = [str(Path(sys.executable).with_name("st")), "run", schema, "--url", base,
               "--header", f"Authorization: Bearer {token}", "--checks", "not_a_server_error,json_error_codes",
               "--max-examples", str(examples), "--seed", str(seed), "--phases", "examples,coverage,fuzzing",
               "--generation-database", "none", "--request-timeout", "20", "--no-color", "--workers", "1",
               "--report", "har", "--report-har-path", str(har),
               # One worker: schemathesis 4 hit a CPython AST SystemError in its coverage phase with 4 threads.
               # Revoking keys would revoke the key the run uses; it has its own tests.
               "--exclude-operation-id", "revoke_key", *selection]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "bench.fuzz_checks", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, check=False)
    print(done.stdout[-3000:])
    if done.returncode != 0:
        raise SystemExit(f"schemathesis found failures in the {name} API")
    return len(json.loads(har.read_text())["log"]["entries"])


@dataclass
class Hostile:
    """Tallies of the hostile runtime phase."""

    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def _deep(rng: random.Random) -> bytes:
    depth = rng.choice([63, 64, 65, 200, 490, 5000, 100_000])
    leaf = rng.choice(['"x"', '"\\u0000"', "1e999", '"\\ud800"', "{}"])
    return ("[" * depth + leaf + "]" * depth).encode()


def _body(rng: random.Random, lease: str | None) -> bytes:
    """A hostile body: binary, deep, oversized, wrong shapes, or a plausible one with a random lease."""
    token = lease if lease and rng.random() < 0.1 else rng.choice([str(uuid.uuid4()), "x", "", "0" * 40])
    plausible: Any = {"lease_token": token, "status": rng.choice(["succeeded", "failed", "nope", None, 1]),
                      "result": rng.choice([None, {"a": [1, 2]}, "x" * rng.randint(0, 5000),
                                            float("nan"), {"a": float("inf")}]),  # dumped as NaN / Infinity
                      "error": rng.choice([None, "boom", 7, ["e"]]), "retry_class": rng.choice([None, "transient", 3]),
                      "wait_s": rng.choice([0, -1, 0.01, "1", True, 1e308]),
                      "instance": rng.choice(["a", "", "x" * 300, 5, None])}
    choices = [
        lambda: rng.randbytes(rng.randint(0, 2000)),
        lambda: _deep(rng),
        lambda: b'{"instance":"' + b"x" * (1024 * 1024 + rng.randint(1, 4096)) + b'"}',
        lambda: json.dumps(plausible).encode(),
        lambda: json.dumps(rng.choice([[], 1, "s", None, [plausible]])).encode(),
        lambda: b'{"lease_token":"' + rng.randbytes(20).hex().encode() + b'", "status": "succeeded"',
        lambda: "{\"instance\": \"\udcff\"}".encode("utf-8", "surrogatepass"),
        lambda: b"\xef\xbb\xbf" + json.dumps(plausible).encode(),
    ]
    return rng.choice(choices)()


def _headers(rng: random.Random, tokens: list[str]) -> dict[bytes, bytes]:
    bearer = rng.choice([None, None, "Bearer", "Basic abc", "Bearer hgr_" + "x" * 43,
                         "Bearer " + "é" * 3, *[f"Bearer {t}" for t in tokens], "bearer " + tokens[0]])
    content_type = rng.choice(["application/json", "text/plain", "", "application/x-www-form-urlencoded",
                               "application/json; charset=latin-1", "multipart/form-data"])
    headers = {b"content-type": content_type.encode()}
    if bearer is not None:
        headers[b"authorization"] = bearer.encode()  # bytes: httpx would refuse a non-ASCII str
    if rng.random() < 0.2:
        headers[b"x-forwarded-for"] = rng.choice([b"1.2.3.4", b"garbage", b"::1, 10.0.0.1"])
    return headers


def _path(rng: random.Random, tasks: list[str]) -> str:
    task = rng.choice([*tasks, *tasks, str(uuid.uuid4()), "not-a-uuid", "%00", "../../v1/me", "x" * 500, ""])
    return rng.choice(["/v1/runtime/heartbeat", "/v1/runtime/claim", f"/v1/runtime/tasks/{task}/renew",
                       f"/v1/runtime/tasks/{task}/report", f"/v1/runtime/tasks/{task}", "/v1/runtime/"])


def hostile_runtime(base: str, tokens: list[str], tasks: list[tuple[str, str]], n: int, seed: int) -> Hostile:
    """``n`` hostile requests to the runtime API; returns the tallies (failures: 5xx, non-JSON, tracebacks)."""
    rng, found = random.Random(seed), Hostile()
    ids, leases = [t for t, _ in tasks], [lease for _, lease in tasks]
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(n):
            path, headers = _path(rng, ids), _headers(rng, tokens)
            body = _body(rng, rng.choice(leases) if leases else None)
            try:
                answer = client.post(path, content=body, headers=headers)
            except httpx.TransportError as exc:  # the server may close a connection sending past the cap
                found.requests += 1
                if not isinstance(exc, httpx.WriteError | httpx.RemoteProtocolError | httpx.ReadError):
                    found.failures.append(f"{path}: {exc!r}")
                continue
            found.requests += 1
            found.statuses[answer.status_code] = found.statuses.get(answer.status_code, 0) + 1
            text = answer.text
            if answer.status_code >= 500 or "Traceback" in text or 'File "/' in text:
                found.failures.append(f"{answer.status_code} {path} {headers} {body[:120]!r}: {text[:200]}")
            elif answer.status_code != 204 and not isinstance(_json_or_none(text), dict):
                found.failures.append(f"{answer.status_code} {path}: not JSON: {text[:200]}")
    return found


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _tasks(base: str, key: str, made: world.World) -> list[tuple[str, str]]:
    """A running task of an HTTP agent (pushed to a dead URL, so its lease stays) and one a pull runtime claimed."""
    auth = {"authorization": f"Bearer {key}"}
    found: list[tuple[str, str]] = []
    with httpx.Client(base_url=base, headers=auth, timeout=30) as client:
        pilots = client.get("/v1/autopilots").json()["items"]
        for pilot in pilots:
            if pilot["title"] in ("chaos github", "chaos standard"):
                client.post(f"/v1/autopilots/{pilot['id']}/runs", json={"payload": {"k": 1}}).raise_for_status()
        claimed = httpx.post(f"{base}/v1/runtime/claim", json={"wait_s": 10},
                             headers={"authorization": f"Bearer {made.runtime_token}"}, timeout=30)
        if claimed.status_code == 200:
            found.append((claimed.json()["task"]["id"], claimed.json()["lease_token"]))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(found) < 2:
            runs = client.get("/v1/runs").json()["items"]
            pushed = [r for r in runs if r.get("task_id") and r["task_id"] not in {t for t, _ in found}]
            if pushed:
                found.append((pushed[0]["task_id"], str(uuid.uuid4())))  # its real lease is the worker's
            time.sleep(0.5)
    return found


def _ingress(base: str, key: str, n: int, seed: int) -> int:
    """The hostile ingress phase (bench/fuzz_ingress.py); the number of requests sent."""
    with httpx.Client(base_url=base, headers={"authorization": f"Bearer {key}"}, timeout=30) as client:
        autopilot = client.get("/v1/autopilots").json()["items"][0]["id"]
    started = time.monotonic()
    found = hostile_ingress(base, make_triggers(base, key, autopilot), n, seed)
    print(f"hostile ingress: {found.requests} requests in {time.monotonic() - started:.0f} s, "
          f"statuses {dict(sorted(found.statuses.items()))}", flush=True)
    if found.failures:
        raise SystemExit("hostile ingress requests failed:\n" + "\n".join(found.failures[:20]))
    return found.requests


def _filters(base: str, key: str, n: int, seed: int) -> int:
    """The hostile payload-filter phase (bench/fuzz_filters.py); the number of requests sent."""
    with httpx.Client(base_url=base, headers={"authorization": f"Bearer {key}"}, timeout=30) as client:
        autopilot = client.get("/v1/autopilots").json()["items"][0]["id"]
    started = time.monotonic()
    found = hostile_filters(base, key, autopilot, n, seed)
    print(f"hostile filters: {found.requests} requests in {time.monotonic() - started:.0f} s, "
          f"statuses {dict(sorted(found.statuses.items()))}", flush=True)
    if found.failures:
        raise SystemExit("hostile filter requests failed:\n" + "\n".join(found.failures[:20]))
    return found.requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=300, help="schemathesis --max-examples per operation")
    parser.add_argument("--server-url", help="use this PostgreSQL server instead of an embedded one")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--hostile", type=int, default=3000, help="hostile runtime API requests after schemathesis")
    parser.add_argument("--hostile-ingress", type=int, default=3000,
                        help="hostile webhook requests to triggers of every signature scheme family")
    parser.add_argument("--hostile-filters", type=int, default=1000,
                        help="hostile payload filters sent to trigger create, edit and filter-test")
    parser.add_argument("--only", choices=["admin", "runtime", "ingress", "filters"], help="fuzz only this API")
    args = parser.parse_args()
    # A claim long-polls up to this: keep it under the 20 s request timeout (wait_s is generated up to 1e308).
    os.environ.setdefault("HOOKGATE_RUNTIME_CLAIM_MAX_WAIT_S", "5")
    cluster = Cluster.create(args.server_url)
    admin = runtime = ingress = 0
    try:
        cluster.start(gateways=1, workers=1, schedulers=0)  # a worker dispatches the runs the hostile phase uses
        base = cluster.gateway_urls()[0]
        key = cluster.bootstrap()["api_key"]
        made = world.build([base], key, "http://127.0.0.1:9/", schedules=1)
        work = Path(tempfile.mkdtemp(prefix="hookgate-fuzz-"))
        if args.only in (None, "ingress"):
            ingress = _ingress(base, key, args.hostile_ingress, args.seed)
        if args.only in (None, "filters"):
            admin += _filters(base, key, args.hostile_filters, args.seed)
        if args.only in (None, "runtime"):
            runtime = schemathesis(f"{base}/openapi.json", base, made.runtime_token, args.examples * 4,
                                   args.seed, work, "runtime", "--include-tag", "runtime")
            print(f"schemathesis runtime: {runtime} requests", flush=True)
            started = time.monotonic()
            found = hostile_runtime(base, [made.runtime_token, key], _tasks(base, key, made), args.hostile,
                                    args.seed)
            print(f"hostile runtime: {found.requests} requests in {time.monotonic() - started:.0f} s, "
                  f"statuses {dict(sorted(found.statuses.items()))}")
            if found.failures:
                raise SystemExit("hostile runtime requests failed:\n" + "\n".join(found.failures[:20]))
            runtime += found.requests
        # The admin API last: its fuzzing may archive the pull agent or revoke what the runtime phases use.
        if args.only in (None, "admin"):
            admin = schemathesis(f"{base}/openapi.json", base, key, args.examples, args.seed, work, "admin",
                                 "--exclude-tag", "runtime", "--exclude-tag", "webhooks")
        logs = "\n".join(p.output() for p in cluster.roles["gateway"])
        if "Traceback" in logs:
            raise SystemExit("the gateway logged a traceback:\n" + logs[-3000:])
    finally:
        cluster.stop()
    cluster.remove()  # only after a clean run: a failure above keeps the database and logs for inspection
    print(f"requests: admin {admin}, runtime {runtime}, ingress {ingress}, total {admin + runtime + ingress}; "
          f"no 5xx, no stack trace, every error a JSON code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
