"""The services ``hookgate worker`` runs (and ``serve`` includes)."""

from __future__ import annotations

from hookgate.context import Context
from hookgate.service import Service


def services(ctx: Context) -> list[Service]:
    """The worker role's services. Dispatch (delivery and push workers) registers here."""
    return []
