"""The hostile payload-filter phase of ``bench/fuzz.py``: filters no schema generates, where the API takes one.

Filters: random trees of every node and operator with wrong value types, unknown keys, extra keys beside
``and``/``or``/``not``, empty and oversized lists, nesting past the depth limit (and past the JSON nesting
limit), too many nodes, huge and tiny numbers, non-ASCII and escaped pointers, and non-objects. Targets:
``POST /v1/autopilots/{id}/triggers``, ``PATCH /v1/triggers/{id}`` and ``POST /v1/triggers/{id}/filter-test``
(with random JSON, form-shaped and text payloads, or a stored delivery). Checks: no 5xx, no stack trace,
every refusal a JSON error code, a refused filter's message naming a position (``at /…``), and every
filter-test answer a boolean verdict.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import httpx

_OPS = ["eq", "ne", "in", "prefix", "exists", "gt", "gte", "lt", "lte"]
_KEYS = ["a", "b", "0", "1", "01", "-", "", "~0", "~1", "é", "a/b", " ", "NumMedia", "action"]


def _pointer(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return rng.choice([None, 3, "no-slash", "/" * 300, ["a"], {"p": 1}])
    return "".join("/" + rng.choice(_KEYS) for _ in range(rng.randint(0, 4)))


def _value(rng: random.Random) -> Any:
    return rng.choice([None, True, False, 0, -1, 1.5, 10**30, -(10**40), 1e308, 5e-324, "", "x", "opened",
                       "é" * 3, "x" * 600, [], [1, "a"], {"a": 1}, list(range(150)), "\u0000", "\ud83d\ude00"])


def _valid_test(rng: random.Random) -> dict[str, Any]:
    path = "".join("/" + rng.choice(_KEYS).replace("~", "~0").replace("/", "~1") for _ in range(rng.randint(0, 3)))
    op = rng.choice(_OPS)
    scalar = rng.choice([None, True, 0, -2.5, 10**20, "", "opened", "2", "é"])
    value = {"exists": rng.choice([True, False]), "in": [scalar, "x"], "prefix": rng.choice(["", "op", "<"])}.get(
        op, rng.choice([0, 1.5, -(10**20), 1e300]) if op in ("gt", "gte", "lt", "lte") else scalar)
    return {"path": path, op: value}


def _test(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.6:
        return _valid_test(rng)
    node: dict[str, Any] = {"path": _pointer(rng)}
    for op in rng.sample(_OPS, rng.choice([1, 1, 1, 1, 0, 2])):
        node[op] = [_value(rng) for _ in range(rng.randint(0, 4))] if op == "in" and rng.random() < 0.6 else \
            _value(rng)
    if rng.random() < 0.05:
        node[rng.choice(["contains", "regex", "and", "Path"])] = _value(rng)
    if rng.random() < 0.05:
        del node["path"]
    return node


def random_filter(rng: random.Random, depth: int = 0) -> Any:
    """A filter tree that is valid about half the time, and wrong in any way a person or a bug might be."""
    if depth >= 6 or (depth > 3 and rng.random() < 0.7) or rng.random() < 0.35:
        return _test(rng)
    kind = rng.choice(["and", "or", "not", "and", "or"])
    if kind == "not":
        node: dict[str, Any] = {"not": random_filter(rng, depth + 1)}
    else:
        width = rng.choice([0, 1, 2, 3, 40 if depth == 0 else 3])
        node = {kind: [random_filter(rng, depth + 1) for _ in range(width)]}
    if rng.random() < 0.03:
        node["path"] = "/a"
    return node


def _extreme(rng: random.Random) -> Any:
    deep: Any = {"path": "/a", "exists": True}
    for _ in range(rng.choice([8, 9, 40, 70])):
        deep = {"not": deep}
    wide = {"or": [{"path": f"/{n}", "eq": n} for n in range(rng.choice([31, 32, 33, 65, 200]))]}
    return rng.choice([deep, wide, [], "x", 7, None, {}, {"and": [{"or": [{"not": {}}]}]}])


def _payload(rng: random.Random) -> Any:
    return rng.choice([
        {"action": "opened", "a": [{"b": 1}], "NumMedia": "2", "a/b": {"~": None}},
        {"0": [0, 1], "é": "é", "": {"": ""}}, ["a", {"a": 1}], "<Response>text body</Response>", "",
        {"a": 10**30, "b": -1e308, "NumMedia": "1e9999"}, None, 3, {"a": "x" * 5000},
    ])


@dataclass
class Found:
    """Tallies of the hostile filter phase."""

    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def check(self, what: str, sent: Any, answer: httpx.Response) -> None:
        """Count an answer and record what is wrong with it."""
        self.requests += 1
        self.statuses[answer.status_code] = self.statuses.get(answer.status_code, 0) + 1
        text = answer.text
        try:
            shape = json.loads(text)
        except ValueError:
            shape = None
        problem = None
        if answer.status_code >= 500 or "Traceback" in text or not isinstance(shape, dict):
            problem = "server error, traceback or not JSON"
        elif answer.status_code >= 400 and not isinstance(shape.get("error"), str):
            problem = "a refusal without an error code"
        elif answer.status_code == 422 and any(e.get("type") == "payload_filter" for e in shape.get("detail", [])) \
                and " at /" not in shape["message"]:
            problem = "a refused filter whose message names no position"
        elif what == "filter-test" and answer.status_code == 200 and not isinstance(shape.get("matches"), bool):
            problem = "a verdict without a boolean"
        if problem:
            self.failures.append(f"{what} {answer.status_code} {problem}: {json.dumps(sent)[:200]} -> {text[:200]}")


def hostile_filters(base: str, key: str, autopilot_id: str, n: int, seed: int) -> Found:
    """``n`` requests carrying hostile filters to the three places the API takes one."""
    rng, found = random.Random(seed), Found()
    with httpx.Client(base_url=base, headers={"authorization": f"Bearer {key}"}, timeout=30) as client:
        made = client.post(f"/v1/autopilots/{autopilot_id}/triggers", json={"kind": "webhook"})
        made.raise_for_status()
        trigger = made.json()
        stored = httpx.post(f"{base}/hooks/{trigger['token']}", json={"action": "opened"}, timeout=30)
        delivery = stored.json().get("delivery_id")
        for _ in range(n):
            node = _extreme(rng) if rng.random() < 0.1 else random_filter(rng)
            where = rng.choice(["create", "edit", "filter-test", "filter-test"])
            if where == "create":
                body: dict[str, Any] = {"kind": "webhook", "payload_filter": node}
                answer = client.post(f"/v1/autopilots/{autopilot_id}/triggers", content=_dump(body),
                                     headers={"content-type": "application/json"})
            elif where == "edit":
                body = {"payload_filter": node}
                answer = client.patch(f"/v1/triggers/{trigger['id']}", content=_dump(body),
                                      headers={"content-type": "application/json"})
            else:
                body = {"delivery_id": delivery} if delivery and rng.random() < 0.3 else {"payload": _payload(rng)}
                if rng.random() < 0.8:
                    body["filter"] = node
                answer = client.post(f"/v1/triggers/{trigger['id']}/filter-test", content=_dump(body),
                                     headers={"content-type": "application/json"})
            found.check(where, body, answer)
    return found


def _dump(body: Any) -> bytes:
    # allow_nan: a float the generator made out of range still goes out, as a client bug would send it.
    return json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
