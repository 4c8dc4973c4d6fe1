#!/usr/bin/env python3
"""Print the blocks of requirements.lock that the running service needs (no test or build tools).

The lock pins the whole tree, test extras included, and says after each pin which packages pulled it in
(``# via``). A package is kept when it is a runtime dependency in pyproject.toml (with its extras) or when
a kept package pulled it in; its block is printed as it stands, hashes and all, so ``pip install
--require-hashes`` checks the same hashes as for the full lock.

Usage: ``runtime-requirements.py LOCK PYPROJECT [EXTRA…]``; EXTRA names more pins to keep (the Dockerfile's
builder adds ``setuptools``, which builds the project and is removed afterwards).
"""

from __future__ import annotations

import re
import sys
import tomllib

NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?")


def canonical(name: str) -> str:
    """PEP 503 form of a distribution name (``Slack_SDK`` and ``slack-sdk`` are one package)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def blocks(lock: str) -> list[tuple[str, str, set[str]]]:
    """(name, block text, names it came via) of every pin; the block runs up to the next pin."""
    found: list[tuple[str, str, set[str]]] = []
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", block)
        if not match:
            continue
        via: set[str] = set()
        lines = block.splitlines()
        for i, line in enumerate(lines):
            text = line.strip()
            if text.startswith("# via"):
                rest = text[len("# via"):].strip()
                parents = [rest] if rest else [x.strip().lstrip("#").strip() for x in lines[i + 1:]]
                via.update(canonical(p.split(" ")[0]) for p in parents if p and not p.startswith("The following"))
        body = "\n".join(line for line in lines if not line.startswith("# The following"))
        found.append((canonical(match.group(1)), body.rstrip() + "\n", via))
    return found


def main() -> None:
    """Select the runtime closure of the lock and print it."""
    lock_path, pyproject_path, *extra = sys.argv[1:]
    with open(pyproject_path, "rb") as fh:
        wanted = {canonical(NAME.match(dep).group(1))  # type: ignore[union-attr]
                  for dep in tomllib.load(fh)["project"]["dependencies"]}
    with open(lock_path) as fh:
        pins = blocks(fh.read())
    wanted |= {canonical(name) for name in extra}
    kept = set(wanted)
    changed = True
    while changed:  # a package is kept when a kept package pulled it in
        changed = False
        for name, _, via in pins:
            if name not in kept and via & kept:
                kept.add(name)
                changed = True
    missing = wanted - {name for name, _, _ in pins}
    if missing:
        sys.exit(f"not pinned in the lock: {', '.join(sorted(missing))}")
    sys.stdout.write("".join(block for name, block, _ in pins if name in kept))


if __name__ == "__main__":
    main()
