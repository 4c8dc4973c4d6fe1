"""Every numeric input of every API is bounded: out of range, non-finite or malformed, it is a 400/422, never a 5xx.

The numeric fields are found in ``/openapi.json`` (request bodies, nested objects, arrays and query
parameters of the admin and runtime APIs), so a field added later is walked too. Each gets values no
field accepts (400 digits, negative, NaN, Infinity, ``1e400`` as a number and as a string, 5,000 digits,
a fraction for an integer) with everything else in the request valid.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.security import estate

HUGE = 10**400
# Values sent as JSON values in a body, and as text in a query parameter.
BODY_VALUES: list[Any] = [HUGE, -HUGE, -1, 0.5, 1.5, "1e400", "NaN", "-Infinity", "9" * 400, "abc", [1], {"a": 1}]
QUERY_VALUES = ["9" * 400, "-" + "9" * 400, "9" * 5000, "-1", "0", "1.5", "NaN", "inf", "-inf", "1e400", "abc", ""]
# Numbers only JSON text can spell (Python's json refuses to write them): put in place of a placeholder string.
RAW_LITERALS = ["1e400", "-1e400", "NaN", "Infinity", "9" * 5000, "1" + "0" * 400 + ".5"]
PLACEHOLDER = "__number__"



def bases(ids: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A valid request body around the numeric field, by operation, so a refusal can only be the field's."""
    return {
        "POST /v1/agents": {"name": "n", "runtime": {"kind": "http", "url": "http://127.0.0.1:9/"}},
        "POST /v1/autopilots": {"title": "t", "execution_mode": "run_only",
                                "assignee": {"type": "agent", "id": ids["agent_id"]}},
        "POST /v1/autopilots/{autopilot_id}/triggers": {"kind": "webhook", "provider": "generic",
                                                        "signature": {"kind": "hmac", "header": "X-Sig"}},
        "PUT /v1/triggers/{trigger_id}/signing-secret": {"secret": "a-secret-of-enough-length"},
        "POST /v1/deliveries/replay": {"status": ["failed"]},
    }


@dataclass(frozen=True)
class Field:
    """One numeric input of one operation: a body path or a query parameter, and its documented schema."""

    method: str
    path: str
    where: str  # "body" or "query"
    at: tuple[str | int, ...]
    schema: dict[str, Any]

    @property
    def name(self) -> str:
        """The field's own name (the last key of its path)."""
        return next(str(p) for p in reversed(self.at) if isinstance(p, str))


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _numbers(doc: dict[str, Any], schema: dict[str, Any], at: tuple[str | int, ...]) -> Iterator[tuple[Any, ...]]:
    """(path, schema) of every integer or number reachable in ``schema``."""
    schema = _resolve(doc, schema)
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            yield from _numbers(doc, option, at)
    if schema.get("type") in ("integer", "number"):
        yield at, schema
    if schema.get("type") == "array" and "items" in schema:
        yield from _numbers(doc, schema["items"], (*at, 0))
    for name, sub in schema.get("properties", {}).items():
        yield from _numbers(doc, sub, (*at, name))


def numeric_fields(doc: dict[str, Any]) -> list[Field]:
    """Every numeric body field and query parameter of every operation in the document."""
    found = []
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            for content in op.get("requestBody", {}).get("content", {}).values():
                found += [Field(method.upper(), path, "body", at, s) for at, s in _numbers(doc, content["schema"], ())]
            for param in op.get("parameters", []):
                if param["in"] == "query":
                    found += [Field(method.upper(), path, "query", at, s)
                              for at, s in _numbers(doc, param["schema"], (param["name"],))]
    return _unique(found)


def _unique(fields: list[Field]) -> list[Field]:
    seen, out = set(), []
    for f in fields:
        key = (f.method, f.path, f.where, f.at)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def accepts(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` is within the documented type and bounds (such a value is not sent as hostile)."""
    if isinstance(value, str):
        try:
            value = float(value) if schema["type"] == "number" else int(value)
        except (ValueError, OverflowError):
            return False
    if isinstance(value, bool) or not isinstance(value, int | float) or abs(value) > 1e300:
        return False  # past any bound (and beyond what a float holds)
    if not math.isfinite(value) or (schema["type"] == "integer" and value != int(value)):
        return False
    low, high = schema.get("minimum"), schema.get("maximum")
    return ((low is None or value >= low) and (high is None or value <= high)
            and ("exclusiveMinimum" not in schema or value > schema["exclusiveMinimum"])
            and ("exclusiveMaximum" not in schema or value < schema["exclusiveMaximum"]))


def _put(body: dict[str, Any], at: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    node: Any = out
    for key, after in zip(at, [*at[1:], None], strict=True):
        if after is None:
            if isinstance(node, list):
                node.append(value)
            else:
                node[key] = value
        elif isinstance(node, list):
            node.append([] if isinstance(after, int) else {})
            node = node[-1]
        else:
            node = node.setdefault(key, [] if isinstance(after, int) else {})
    return out


@pytest.fixture
async def made(ctx, client) -> estate.Estate:
    return await estate.build(ctx, client, "acme")


def _headers(made: estate.Estate, path: str) -> dict[str, str]:
    if path.startswith("/v1/runtime/"):
        return {"authorization": "Bearer " + next(s for s in made.secrets if s.startswith("hgr_"))}
    return made.auth


def _url(made: estate.Estate, path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: made.ids[m.group(1)], path)


async def _send(client: httpx.AsyncClient, made: estate.Estate, field: Field, value: Any, *,
                raw: str | None = None) -> httpx.Response:
    url, headers = _url(made, field.path), _headers(made, field.path)
    if field.where == "query":
        return await client.request(field.method, url, headers=headers, params={field.name: value})
    body = _put(bases(made.ids).get(f"{field.method} {field.path}", {}), field.at, PLACEHOLDER if raw else value)
    text = json.dumps(body)
    if raw is not None:
        text = text.replace(json.dumps(PLACEHOLDER), raw)
    return await client.request(field.method, url, headers=headers | {"content-type": "application/json"},
                                content=text)


def _refused_for(answer: httpx.Response, field: Field, sent: Any) -> None:
    """A 400 or 422 JSON error; a 422 names the field it refused."""
    where = (field.method, field.path, field.at, str(sent)[:40])
    assert answer.status_code in (400, 422), (*where, answer.status_code, answer.text[:300])
    error = answer.json()
    assert set(error) >= {"error", "message"}, (*where, error)
    if answer.status_code == 422:
        assert field.name in json.dumps(error), (*where, error)


async def test_the_walk_finds_the_numeric_inputs_of_every_api(client):
    fields = numeric_fields((await client.get("/openapi.json")).json())
    named = {(f.method, f.path, f.at) for f in fields}
    assert ("POST", "/v1/runtime/claim", ("wait_s",)) in named
    assert ("POST", "/v1/agents", ("runtime", "timeout_s")) in named
    assert ("PATCH", "/v1/agents/{agent_id}", ("retry_schedule", 0)) in named
    assert ("GET", "/v1/triggers/{trigger_id}/preview", ("count",)) in named
    assert ("GET", "/v1/audit", ("limit",)) in named
    assert len(fields) >= 25


async def test_every_numeric_field_is_documented_with_both_bounds(client):
    for field in numeric_fields((await client.get("/openapi.json")).json()):
        s = field.schema
        assert "minimum" in s or "exclusiveMinimum" in s, (field.method, field.path, field.at, s)
        assert "maximum" in s or "exclusiveMaximum" in s, (field.method, field.path, field.at, s)


async def test_hostile_numbers_in_every_body_and_query_are_refused_never_5xx(client, made):
    fields = numeric_fields((await client.get("/openapi.json")).json())
    sent = 0
    for field in fields:
        values = QUERY_VALUES if field.where == "query" else BODY_VALUES
        for value in values:
            if accepts(field.schema, value):
                continue
            _refused_for(await _send(client, made, field, value), field, value)
            sent += 1
        if field.where == "body":
            for literal in RAW_LITERALS:
                _refused_for(await _send(client, made, field, None, raw=literal), field, literal)
                sent += 1
    assert sent >= 300


async def test_the_bases_are_valid_so_each_refusal_is_the_fields_own(client, made):
    """Each body base with an accepted value for its field is not refused as invalid (it may still conflict)."""
    fields = numeric_fields((await client.get("/openapi.json")).json())
    for field in fields:
        if field.where != "body" or f"{field.method} {field.path}" not in bases(made.ids):
            continue
        low = field.schema.get("minimum", field.schema.get("exclusiveMinimum", 0) + 1)
        answer = await _send(client, made, field, low)
        assert answer.status_code < 400 or answer.status_code == 409, (field.path, field.at, answer.text)


async def test_a_runtime_claim_waiting_400_digits_of_seconds_is_422_not_500(client, made):
    answer = await client.post("/v1/runtime/claim", headers=_headers(made, "/v1/runtime/claim"),
                               json={"wait_s": HUGE})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "invalid_request" and "wait_s" in answer.json()["message"]
