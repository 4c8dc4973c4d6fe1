"""The docs say what the code does: every doc is listed, every error code documented, the figures up front.

Error codes are found in the source with ``ast`` (nothing is imported for that): the code argument of
``ApiError`` and ``error_response``, a snake_case first argument of a raised exception (the domain errors
carry their code so), a class's ``code = "…"``, an ``"error"`` key of a dict literal and of a prebuilt JSON
body. The few codes that travel through a constant are added by name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "autopilot")
CODE = re.compile(r"^[a-z]+(?:_[a-z]+)*$")
BODY_ERROR = re.compile(rb'"error":\s*"([a-z_]+)"')


def _documented_section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end != -1 else None]


def test_readme_lists_every_doc() -> None:
    listed = _documented_section(ROOT / "README.md", "## Documentation")
    missing = [f"docs/{doc.name}" for doc in sorted((ROOT / "docs").glob("*.md")) if f"docs/{doc.name}" not in listed]
    assert not missing, f"README's Documentation section does not list {missing}"


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _codes_in(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name in ("ApiError", "error_response") and len(node.args) > 1:
                found.add(_string(node.args[1]) or "")
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            if isinstance(node.exc.func, ast.Name) and node.exc.func.id[0].isupper():  # an exception class
                found.add(_string(node.exc.args[0]) or "")
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and [getattr(t, "id", "") for t in stmt.targets] == ["code"]:
                    found.add(_string(stmt.value) or "")
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if _string(key) == "error":
                    found.add(_string(value) or "")
        if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            found.update(m.decode() for m in BODY_ERROR.findall(node.value))
    return {code for code in found if CODE.match(code)}


def answered_codes() -> set[str]:
    """Every error code a client of the HTTP edge can be answered with."""
    from gateway.admin.channels import _URL_CODES
    from gateway.admin.triggers import FIELD_CODES
    from gateway.ingress.decision import REJECTED_TEXT
    from hookgate import egress

    found = {egress.FORBIDDEN, egress.UNRESOLVABLE, *_URL_CODES.values(), *FIELD_CODES.values(), *REJECTED_TEXT,
             "method_not_allowed"}
    for package in PACKAGES:
        for module in (ROOT / package).rglob("*.py"):
            found |= _codes_in(ast.parse(module.read_text()))
    found |= _codes_in(ast.parse((ROOT / "hookgate" / "egress.py").read_text()))
    return found


def documented_codes() -> set[str]:
    """The codes of the first column of docs/API.md's "Error codes" table."""
    section = _documented_section(ROOT / "docs" / "API.md", "## Error codes")
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, re.M))


def test_every_error_code_an_endpoint_answers_is_in_the_api_doc() -> None:
    missing = answered_codes() - documented_codes()
    assert not missing, f"docs/API.md, 'Error codes', does not list {sorted(missing)}"


def test_the_api_doc_lists_no_code_that_nothing_answers() -> None:
    stale = documented_codes() - answered_codes()
    assert not stale, f"docs/API.md, 'Error codes', lists {sorted(stale)}, which no code answers"


def test_benchmarks_open_with_one_table_of_current_figures() -> None:
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    first = text[text.index("\n## "):]
    assert first.startswith("\n## Current figures"), "docs/BENCHMARKS.md does not open with its current figures"
    rows = [line for line in _documented_section(ROOT / "docs" / "BENCHMARKS.md", "## Current figures").splitlines()
            if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header == ["figure", "command", "Hookgate", "baseline or peer", "date, tree"]
    body = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]
    assert len(body) >= 6
    for figure, command, hookgate, _, dated in body:
        script = re.search(r"bench/(\w+)\.py", command)
        assert script and (ROOT / "bench" / f"{script.group(1)}.py").exists(), f"{figure}: no bench script"
        assert re.search(r"\d", hookgate), f"{figure}: no figure"
        assert re.search(r"20\d\d-\d\d-\d\d", dated), f"{figure}: no date"
