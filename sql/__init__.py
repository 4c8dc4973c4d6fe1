"""SQL that ships with Hookgate: forward-only migrations, live function definitions and named queries.

Migrations (``migrations/NNNN_name.sql``) are the history of the tables; ``functions/<name>.sql`` holds the
current definition of each SQL function, re-applied when it changes. Queries live in ``queries/<table>.sql``,
each headed ``-- name: object_verb`` followed by comment lines that say what it does and what ``$1..$n``
are. :data:`Q` loads them once; runtime Python holds no SQL. See ``sql/README.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Final

_NAME = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$")


@dataclass(frozen=True)
class Query:
    """One named statement: its name, its text, its doc comment and the file it came from."""

    name: str
    text: str
    doc: str
    source: str


class QueryFileError(ValueError):
    """A query file is malformed (no name, a duplicate name, an empty body)."""


def parse_queries(text: str, source: str) -> list[Query]:
    """Split one .sql file into its named queries."""
    found: list[Query] = []
    name: str | None = None
    doc: list[str] = []
    body: list[str] = []

    def flush() -> None:
        if name is None:
            if any(line.strip() and not line.lstrip().startswith("--") for line in body):
                raise QueryFileError(f"{source}: SQL before the first '-- name:' header")
            return
        sql = "\n".join(body).strip().rstrip(";").strip()
        if not sql:
            raise QueryFileError(f"{source}: query {name} has no body")
        found.append(Query(name, sql, " ".join(doc).strip(), source))

    for line in text.splitlines():
        match = _NAME.match(line.strip())
        if match:
            flush()
            name, doc, body = match.group(1), [], []
        elif name is not None and not body and line.lstrip().startswith("--"):
            doc.append(line.lstrip()[2:].strip())
        else:
            body.append(line)
    flush()
    return found


def load_queries() -> dict[str, Query]:
    """Read every ``queries/*.sql`` file shipped in this package, refusing duplicate names."""
    queries: dict[str, Query] = {}
    folder = resources.files(__name__) / "queries"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for query in parse_queries(entry.read_text(encoding="utf-8"), entry.name):
            if query.name in queries:
                raise QueryFileError(f"duplicate query name {query.name} in {entry.name}")
            queries[query.name] = query
    return queries


class _Queries:
    """Attribute access to query texts: ``Q.delivery_take`` is the SQL string."""

    def __init__(self) -> None:
        self._all: dict[str, Query] | None = None

    @property
    def all(self) -> dict[str, Query]:
        """Every loaded query by name (loaded on first use, once)."""
        if self._all is None:
            self._all = load_queries()
        return self._all

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.all[name].text
        except KeyError:
            raise AttributeError(f"no query named {name!r}") from None


Q: Final = _Queries()


def migration_files() -> list[tuple[int, str, str]]:
    """The shipped migrations as ``(number, file name, sql)``, in order."""
    folder = resources.files(__name__) / "migrations"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number = int(entry.name.split("_", 1)[0]) if entry.name[:4].isdigit() else -1
            found.append((number, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def function_files() -> list[tuple[str, str]]:
    """The shipped function definitions as ``(file name, sql)``, in file name order."""
    folder = resources.files(__name__) / "functions"
    found = [(entry.name, entry.read_text(encoding="utf-8")) for entry in folder.iterdir()
             if entry.name.endswith(".sql")]
    return sorted(found)
