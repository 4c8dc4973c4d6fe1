"""Payload filters: a small predicate language over a webhook's body, checked in ingress step 9.

A filter is one JSON node (docs/PROVIDERS.md, "Payload filters"):

- a test ``{"path": "/json/pointer", OP: value}`` with exactly one ``OP`` of ``eq``, ``ne``, ``in``,
  ``prefix``, ``exists``, ``gt``, ``gte``, ``lt``, ``lte``;
- ``{"and": [node, …]}``, ``{"or": [node, …]}`` (1 to ``MAX_CHILDREN`` nodes), ``{"not": node}``.

Paths are JSON pointers (RFC 6901) into the parsed body: a JSON body as sent, a form as an object of its
fields (strings; a repeated field is a list), a text or XML body as one string that only the root pointer
``""`` reaches. A pointer that does not resolve is *absent*: ``exists: false`` and ``ne`` hold, every other
test fails. ``eq``/``ne``/``in`` compare JSON scalars by type (``1`` equals ``1.0``, never ``true`` nor
``"1"``); ``gt``/``gte``/``lt``/``lte`` compare numbers, and read a string holding a decimal numeral (a form
field) as its number; ``prefix`` tests strings.

:func:`parse` validates a filter when it is saved (:class:`FilterError` names the position of the fault as
a pointer into the filter, ``/and/1/gt``) within ``MAX_DEPTH`` and ``MAX_NODES``; :func:`evaluate` never
raises and says which node decided, in words.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["MAX_DEPTH", "MAX_NODES", "Filter", "FilterError", "Verdict", "describe", "evaluate", "load", "parse"]

MAX_DEPTH = 8
"""Nesting of ``and``/``or``/``not`` (a test at the root is depth 1)."""
MAX_NODES = 64
"""Nodes in one filter, tests and combinators together."""
MAX_CHILDREN = 32
"""Nodes in one ``and`` or ``or``."""
MAX_IN = 100
"""Values in one ``in``."""
MAX_TEXT = 500
"""Characters of a string value."""
MAX_PATH = 200
"""Characters of a path."""
MAX_BYTES = 16_384
"""The filter's JSON text (the database refuses four times as much)."""
_SHOWN = 60
"""Characters of a value quoted in a verdict's words (a delivery's page, filter-test)."""

Op = Literal["eq", "ne", "in", "prefix", "exists", "gt", "gte", "lt", "lte"]
"""A test's operator."""
OPS: tuple[Op, ...] = ("eq", "ne", "in", "prefix", "exists", "gt", "gte", "lt", "lte")
"""Every operator, in the order the docs list them."""
_NUMERAL = re.compile(r"\s*-?[0-9]{1,60}(\.[0-9]{1,60})?([eE][+-]?[0-9]{1,4})?\s*")
_ABSENT = object()


class FilterError(ValueError):
    """A filter that cannot be saved: ``at`` is the faulty position as a pointer into the filter."""

    def __init__(self, at: str, why: str) -> None:
        super().__init__(f"at {at or '/'}: {why}")
        self.at, self.why = at, why


@dataclass(frozen=True)
class Verdict:
    """Whether a body matches, the node that decided (a pointer into the filter) and why, in words."""

    matches: bool
    node: str
    reason: str


@dataclass(frozen=True)
class _Node:
    """A compiled node: ``holds`` is the fast test every request takes; ``explain`` says why, for one verdict."""

    holds: Callable[[object], bool]
    explain: Callable[[object], Verdict]


@dataclass(frozen=True)
class Filter:
    """A validated filter, ready to evaluate; ``source`` is the JSON it was parsed from."""

    source: dict[str, Any]
    _root: _Node

    def matches(self, body: object) -> bool:
        """Whether a parsed body (a JSON value or the text of a text body) matches; no words are made."""
        return self._root.holds(body)

    def __call__(self, body: object) -> Verdict:
        """The verdict on a parsed body, with the deciding node in words; never raises."""
        return self._root.explain(body)


def parse(node: object) -> Filter:
    """Validate a filter and compile it; :class:`FilterError` names the first fault's position."""
    if not isinstance(node, dict):
        raise FilterError("", "a filter is a JSON object")
    if len(json.dumps(node, ensure_ascii=False)) > MAX_BYTES:
        raise FilterError("", f"a filter's JSON is at most {MAX_BYTES} characters")
    counter = [0]
    return Filter(node, _compile(node, "", 1, counter))


def load(source: dict[str, Any]) -> Filter:
    """A filter as stored; one that no longer validates (a lower limit since) matches nothing, and says why.

    Failing closed: a trigger that asked for a subset of its deliveries never gets them all by surprise.
    """
    try:
        return parse(source)
    except FilterError as exc:
        refusal = Verdict(False, exc.at, f"the saved filter is no longer valid ({exc})")
        return Filter(source, _Node(lambda body: False, lambda body: refusal))


def evaluate(node: Filter, body: object) -> Verdict:
    """``node`` on ``body`` (a parsed JSON or form body, or a text body's string); never raises."""
    return node(body)


def describe(verdict: Verdict) -> str:
    """What a delivery ignored by its payload filter stores as its reason (a sentence for its page)."""
    where = f" (node {verdict.node})" if verdict.node else ""
    return f"the payload filter does not match: {verdict.reason}{where}"


# -- compiling ----------------------------------------------------------------------------------------

def _compile(node: object, at: str, depth: int, counter: list[int]) -> _Node:
    if not isinstance(node, dict):
        raise FilterError(at, "a node is a JSON object: a test with \"path\", or \"and\", \"or\" or \"not\"")
    counter[0] += 1
    if counter[0] > MAX_NODES:
        raise FilterError(at, f"a filter holds at most {MAX_NODES} nodes")
    if depth > MAX_DEPTH:
        raise FilterError(at, f"a filter nests at most {MAX_DEPTH} levels")
    combinators = [k for k in ("and", "or", "not") if k in node]
    if combinators:
        return _combinator(node, combinators, at, depth, counter)
    return _test(node, at)


def _combinator(node: dict[str, Any], keys: list[str], at: str, depth: int, counter: list[int]) -> _Node:
    if len(node) != 1:
        extra = next(k for k in node if k != keys[0])
        raise FilterError(f"{at}/{_escape(extra)}", f"\"{keys[0]}\" stands alone in its node")
    key = keys[0]
    here = f"{at}/{key}"
    if key == "not":
        inner = _compile(node["not"], here, depth + 1, counter)
        return _Node(lambda body: not inner.holds(body), lambda body: _negate(inner.explain(body)))
    children = node[key]
    if not isinstance(children, list) or not 1 <= len(children) <= MAX_CHILDREN:
        raise FilterError(here, f"\"{key}\" takes a list of 1 to {MAX_CHILDREN} nodes")
    parts = [_compile(child, f"{here}/{n}", depth + 1, counter) for n, child in enumerate(children)]
    return _all(parts, here) if key == "and" else _any(parts, here)


def _negate(inner: Verdict) -> Verdict:
    return Verdict(not inner.matches, inner.node, inner.reason)


def _all(parts: Sequence[_Node], at: str) -> _Node:
    tests = tuple(part.holds for part in parts)

    def holds(body: object) -> bool:
        for test in tests:
            if not test(body):
                return False
        return True

    def explain(body: object) -> Verdict:
        for part in parts:
            if not part.holds(body):
                return part.explain(body)
        return Verdict(True, at, f"all {len(parts)} conditions of {at} hold")
    return _Node(holds, explain)


def _any(parts: Sequence[_Node], at: str) -> _Node:
    tests = tuple(part.holds for part in parts)

    def holds(body: object) -> bool:
        for test in tests:
            if test(body):
                return True
        return False

    def explain(body: object) -> Verdict:
        for part in parts:
            if part.holds(body):
                return part.explain(body)
        return Verdict(False, at, f"none of the {len(parts)} conditions of {at} holds")
    return _Node(holds, explain)


def _test(node: dict[str, Any], at: str) -> _Node:
    unknown = [k for k in node if k != "path" and k not in OPS]
    if unknown:
        raise FilterError(f"{at}/{_escape(unknown[0])}", f"unknown key; use path with one of {', '.join(OPS)}, "
                                                         "or and, or, not")
    path = node.get("path")
    if not isinstance(path, str) or len(path) > MAX_PATH or (path and not path.startswith("/")):
        raise FilterError(f"{at}/path", f"\"path\" is a JSON pointer (\"\" or \"/a/0/b\", at most {MAX_PATH} "
                                        "characters)")
    ops = [k for k in node if k in OPS]
    if len(ops) != 1:
        raise FilterError(at, "a test has \"path\" and exactly one operator: " + ", ".join(OPS))
    op: Op = ops[0]
    value = _operand(op, node[op], f"{at}/{op}")
    # Equality tests compare keys made once here (``in``: a set), not the filter's values per request.
    operand = frozenset(map(_key, value)) if op == "in" else _key(value) if op in ("eq", "ne") else value  # type: ignore[call-overload]
    steps = tuple(token.replace("~1", "/").replace("~0", "~") for token in path.split("/")[1:])
    test, words = _TESTS[op], _WORDS[op]

    def explain(body: object) -> Verdict:
        found = _resolve(body, steps)
        ok = test(found, operand)
        return Verdict(ok, at, f"{path or 'the body'} {_shown(found)}, {words(ok, found, value)}")
    return _Node(lambda body: test(_resolve(body, steps), operand), explain)


def _operand(op: Op, value: object, at: str) -> object:
    """The operator's value, checked for its kind."""
    if op == "exists":
        if not isinstance(value, bool):
            raise FilterError(at, "\"exists\" takes true or false")
        return value
    if op in ("gt", "gte", "lt", "lte"):
        if not _is_number(value) or not math.isfinite(float(value)):  # type: ignore[arg-type]
            raise FilterError(at, f"\"{op}\" compares with a number")
        return value
    if op == "prefix":
        if not isinstance(value, str) or len(value) > MAX_TEXT:
            raise FilterError(at, f"\"prefix\" takes a string of at most {MAX_TEXT} characters")
        return value
    if op == "in":
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_IN:
            raise FilterError(at, f"\"in\" takes a list of 1 to {MAX_IN} values")
        for n, item in enumerate(value):
            _scalar(item, f"{at}/{n}")
        return tuple(value)
    return _scalar(value, at)


def _scalar(value: object, at: str) -> object:
    if value is None or isinstance(value, bool | str) or _is_number(value):
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise FilterError(at, f"a string of at most {MAX_TEXT} characters")
        if isinstance(value, float) and not math.isfinite(value):
            raise FilterError(at, "a finite number")
        return value
    raise FilterError(at, "compares with a string, a number, true, false or null (not an object or a list)")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


# -- evaluating ---------------------------------------------------------------------------------------

def _resolve(body: object, steps: Sequence[str]) -> object:
    """The value at a pointer, or ``_ABSENT``; array indexes are decimal without leading zeros (RFC 6901).

    Parsed bodies hold exact ``dict`` and ``list`` objects, so a type check is enough (and cheaper than
    ``isinstance`` against ABCs, on every request).
    """
    node = body
    for key in steps:
        kind = type(node)
        if kind is dict:
            node = node.get(key, _ABSENT)  # type: ignore[attr-defined]
            if node is _ABSENT:
                return _ABSENT
        elif kind is list and key.isdigit() and key.isascii() and (key == "0" or key[0] != "0") \
                and len(key) < 10 and int(key) < len(node):  # type: ignore[arg-type]
            node = node[int(key)]  # type: ignore[index]
        else:
            return _ABSENT
    return node


_KINDS: dict[type, str] = {str: "s", bool: "b", int: "n", float: "n", type(None): "z"}


def _key(value: object) -> tuple[str, object] | None:
    """A scalar as JSON compares it: numbers by value (``1`` is ``1.0``), the rest by type; None otherwise."""
    kind = _KINDS.get(type(value))
    return None if kind is None else (kind, value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: object, b: object) -> bool:
    """JSON equality of scalars: numbers by value, everything else by type and value (``true`` is not ``1``)."""
    if _is_number(a) and _is_number(b):
        return a == b
    return type(a) is type(b) and a == b and a is not _ABSENT


def _number(value: object) -> int | float | None:
    """A number, or a string holding a decimal numeral read as one (form fields); else None."""
    if _is_number(value):
        return value  # type: ignore[return-value]
    if isinstance(value, str) and _NUMERAL.fullmatch(value):
        text = value.strip()
        return int(text) if text.lstrip("-").isdigit() else float(text)
    return None


def _shown(found: object) -> str:
    if found is _ABSENT:
        return "is absent"
    if isinstance(found, dict | list):
        return f"is {'an object' if isinstance(found, dict) else 'a list'}"
    text = json.dumps(found, ensure_ascii=False)
    return f"is {text if len(text) <= _SHOWN else text[:_SHOWN] + '…'}"


def _json(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def _compare(test: Callable[[Any, Any], bool]) -> Callable[[object, object], bool]:
    def check(found: object, value: object) -> bool:
        number = _number(found)
        return number is not None and test(number, value)
    return check


_TESTS: dict[str, Callable[[object, object], bool]] = {
    "eq": lambda found, key: _key(found) == key, "ne": lambda found, key: _key(found) != key,
    "in": lambda found, keys: _key(found) in keys,  # type: ignore[operator]
    "prefix": lambda found, value: isinstance(found, str) and found.startswith(value),  # type: ignore[arg-type]
    "exists": lambda found, value: (found is not _ABSENT) == value,
    "gt": _compare(lambda a, b: a > b), "gte": _compare(lambda a, b: a >= b),
    "lt": _compare(lambda a, b: a < b), "lte": _compare(lambda a, b: a <= b),
}
"""Each operator's test of the value found (``_ABSENT`` if none) against the filter's value (its key for
``eq``/``ne``, the set of keys for ``in``)."""


def _equal_words(ok: bool, found: object, value: object) -> str:
    return f"{'' if _same(found, value) else 'not '}equal to {_json(value)}"


def _number_words(name: str) -> Callable[[bool, object, object], str]:
    def words(ok: bool, found: object, value: object) -> str:
        if _number(found) is None:
            return f"not a number to compare {name} {_json(value)}"
        return f"{'' if ok else 'not '}{name} {_json(value)}"
    return words


_WORDS: dict[str, Callable[[bool, object, object], str]] = {
    "eq": _equal_words, "ne": _equal_words,
    "in": lambda ok, found, value: f"{'' if ok else 'not '}one of {_json(list(value))}",  # type: ignore[call-overload]
    "prefix": lambda ok, found, value: f"which {'starts' if ok else 'does not start'} with {_json(value)}",
    "exists": lambda ok, found, value: f"and the filter wants it {'present' if value else 'absent'}",
    "gt": _number_words("greater than"), "gte": _number_words("at least"),
    "lt": _number_words("less than"), "lte": _number_words("at most"),
}
"""Each operator's words for what it found, once a verdict is asked for."""
