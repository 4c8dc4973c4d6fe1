"""In-process CPU of the ingress steps a trigger's configuration changes, per request, without the network.

    python bench/scheme_cpu.py [--number 5000]

For the subjects of ``bench/ingress.py --schemes`` (the GitHub preset; the custom timestamped HMAC scheme
with its own sources; the same with its payload filter; the Ed25519 scheme), times what one request costs
in the steps that differ between them: parsing the 1 KiB body, verifying the signature, naming the event,
reading the dedupe key and, for the filtered subject, testing the payload filter. The best of five repeats
is printed, in microseconds, beside the GitHub preset's; the HTTP server, the database and the admission
are the same for every subject and left out. On a host whose load swings the end-to-end rates, this is the
steady comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sys
import time
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: E402

from autopilot import payload_filter  # noqa: E402
from bench.ingress import CUSTOM_HMAC, ED25519, PAYLOAD_FILTER, SECRET  # noqa: E402
from gateway import schemes  # noqa: E402
from gateway.envelope import parse_body  # noqa: E402
from gateway.ingress.triggers import preset_of  # noqa: E402
from gateway.providers import Inbound, Preset  # noqa: E402


def _raw() -> bytes:
    issue = {"number": 1347, "title": "Found a bug", "user": {"login": "octocat", "id": 1}}
    body = {"action": "opened", "delivery": "d-1", "issue": issue, "padding": ""}
    body["padding"] = "x" * (1024 - len(json.dumps(body, separators=(",", ":"))))
    return json.dumps(body, separators=(",", ":")).encode()


def _subjects(raw: bytes, now: int) -> list[tuple[str, Preset, dict[str, str], str, Any]]:
    """(label, preset, headers, secret or public key, filter or None) of each subject."""
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    sources = {"dedupe_key_source": "header:x-request-id", "event_source": "json:/action"}
    github = preset_of({"provider": "github", "signature_scheme": None, "dedupe_key_source": None,
                        "event_source": None})
    custom = preset_of({"provider": "custom", "signature_scheme": CUSTOM_HMAC, **sources})
    signed = preset_of({"provider": "custom", "signature_scheme": ED25519, **sources})
    mac = hmac.new(SECRET.encode(), f"{now}.".encode() + raw, hashlib.sha256).hexdigest()
    json_type = {"content-type": "application/json", "x-request-id": "d-1"}
    custom_headers = json_type | {"x-timestamp": str(now), "x-signature": f"sha256={mac}"}
    return [
        ("github", github, json_type | {"x-github-event": "issues", "x-github-delivery": "d-1",
                                        "x-hub-signature-256": "sha256=" + hmac.new(
                                            SECRET.encode(), raw, hashlib.sha256).hexdigest()}, SECRET, None),
        ("hmac", custom, custom_headers, SECRET, None),
        ("hmac+filter", custom, custom_headers, SECRET, payload_filter.parse(PAYLOAD_FILTER)),
        ("ed25519", signed, json_type | {"x-signature-timestamp": str(now), "x-signature-ed25519": key.sign(
            str(now).encode() + raw).hex()}, schemes.public_key_text(public, "ed25519"), None),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=5000, help="requests per repeat (5000)")
    args = parser.parse_args()
    raw, now = _raw(), int(time.time())
    results: dict[str, float] = {}
    for label, preset, headers, secret, body_filter in _subjects(raw, now):
        def one(preset: Preset = preset, headers: dict[str, str] = headers, secret: str = secret,
                body_filter: Any = body_filter, label: str = label) -> None:
            payload = parse_body(raw, "application/json")
            req = Inbound(raw=raw, headers=headers, body=payload, url="http://127.0.0.1/hooks/x", now=now)
            if preset.verify(req, (secret,)) != "valid" or (body_filter is not None and not body_filter.matches(
                    payload)):
                raise SystemExit(f"{label}: the request does not pass")
            preset.event(req), preset.dedupe_key(req)
        results[label] = min(timeit.repeat(one, number=args.number, repeat=5)) / args.number * 1e6
        print(f"{label:12s} {results[label]:7.1f} us/request  {results[label] - results['github']:+7.1f} us "
              "against github", flush=True)


if __name__ == "__main__":
    main()
