"""A stored webhook delivery as the domain passes it around (the worker's leases, replays)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from autopilot import admission


@dataclass(frozen=True)
class Delivery:
    """The columns of ``webhook_delivery`` the worker and replays act on (``status``, lease: None if not read)."""

    id: UUID
    workspace_id: UUID
    trigger_id: UUID
    autopilot_id: UUID
    event: str
    envelope: dict[str, Any] | None
    run_id: UUID | None
    status: str | None = None
    lease_token: UUID | None = None
    dispatch_attempts: int = 0

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Delivery:
        """A delivery from any row with its identifying columns (``SELECT *`` or the take's leased rows)."""
        return cls(row["id"], row["workspace_id"], row["trigger_id"], row["autopilot_id"], row["event"],
                   row["envelope"], row["run_id"], row.get("status"), row.get("lease_token"),
                   row.get("dispatch_attempts") or 0)

    def admission(self) -> admission.Request:
        """The request to admit this delivery's run (ingress steps 9-10 again: crash window, replay)."""
        return admission.Request(self.autopilot_id, "webhook", self.envelope or {}, self.trigger_id, self.id)
