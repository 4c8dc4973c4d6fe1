"""The tree shows the roles: which package may import which (parsed with ``ast``, nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: package -> the packages none of its modules may import (anywhere in the module).
FORBIDDEN = {
    "worker": {"gateway"},
    "scheduler": {"gateway", "worker"},
    "autopilot": {"gateway", "worker", "scheduler"},
    "gateway": {"worker"},
}
ROLES = {"gateway", "worker", "scheduler"}
#: The one module of the shared package that composes the roles, and only inside its functions.
COMPOSER = "hookgate/cli.py"


def _imports(tree: ast.AST) -> list[tuple[ast.stmt, str]]:
    found: list[tuple[ast.stmt, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node, node.module))
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _top(name: str) -> str:
    return name.split(".")[0]


def test_roles_import_only_what_they_may():
    wrong = [
        f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
        for package, banned in FORBIDDEN.items() for path in _modules(package)
        for node, name in _imports(ast.parse(path.read_text())) if _top(name) in banned
    ]
    assert wrong == []


def test_shared_package_imports_no_role_at_module_level():
    wrong = []
    for path in _modules("hookgate"):
        tree = ast.parse(path.read_text())
        module_level = {id(node) for node in tree.body}
        for node, name in _imports(tree):
            if _top(name) not in ROLES:
                continue
            if id(node) in module_level or str(path.relative_to(ROOT)) != COMPOSER:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert wrong == []
