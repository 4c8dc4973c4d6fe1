"""The services ``hookgate scheduler`` runs (and ``serve`` includes)."""

from __future__ import annotations

from hookgate.context import Context
from hookgate.service import Service


def services(ctx: Context) -> list[Service]:
    """The scheduler role's services. The DB-backed scheduler and its jobs register here."""
    return []
