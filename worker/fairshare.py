"""Fair shares of one worker process's push slots: workspaces first, then agents within each workspace.

A worker process pushes at most ``capacity`` tasks at once (``push_inflight``, never more than
``push_connections``, so that no push ever waits for an HTTP connection another agent's push holds). Those slots
are split by max-min fairness: the workspaces that want pushes (an agent with due tasks, or pushes in flight)
get equal parts, a workspace that needs less than its part leaving the rest to the others; each workspace's part
is split the same way among its agents. What an agent wants: without bound while it has due tasks (or while the
take is about to make some), else the pushes it has in flight. An agent or a workspace alone never gets the last
``headroom`` slots (an eighth of them, at least one), so that one that arrives while another agent hangs finds
slots free at once instead of waiting for the hanging pushes to time out.

Shares are checked when tasks are claimed (a push is never cut): an agent whose pushes took its share while it
was alone keeps them until they end, and meanwhile the others share what is free.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import UUID

#: What an agent with due tasks wants: as much as it can get.
UNBOUNDED = math.inf
#: The workspace and agent of a newcomer the process has not seen yet (shares of the take's new agents).
NEWCOMER = UUID(int=0)

K = TypeVar("K", bound=Hashable)


def waterfill(capacity: float, demands: Mapping[K, float]) -> dict[K, float]:
    """Max-min fair split of ``capacity``: demands below an equal part are met, the rest is split equally."""
    parts: dict[K, float] = {}
    left, pending = capacity, sorted(demands, key=lambda k: demands[k])
    while pending:
        equal = left / len(pending)
        key = pending[0]
        if demands[key] > equal:
            parts.update(dict.fromkeys(pending, equal))
            break
        parts[key] = demands[key]
        left -= demands[key]
        pending.pop(0)
    return parts


def headroom(capacity: int) -> int:
    """Slots a lone agent or workspace leaves free for a newcomer: an eighth, at least one (none of one slot)."""
    return 0 if capacity <= 1 else max(1, capacity // 8)


@dataclass
class Shares:
    """In-flight pushes by agent, the agents with due tasks, each agent's workspace, and who was served last."""

    capacity: int
    inflight: dict[UUID, int] = field(default_factory=dict)
    workspace_of: dict[UUID, UUID] = field(default_factory=dict)
    due: set[UUID] = field(default_factory=set)
    #: Turn of the latest push started, by agent and by workspace (higher = more recent).
    agent_served: dict[UUID, int] = field(default_factory=dict)
    workspace_served: dict[UUID, int] = field(default_factory=dict)
    _turn: int = 0

    def started(self, agent: UUID, workspace: UUID) -> None:
        """A push of ``agent`` started: it holds one slot, and it is now the most recently served."""
        ws = self.workspace_of.setdefault(agent, workspace)
        self.inflight[agent] = self.inflight.get(agent, 0) + 1
        self._turn += 1
        self.agent_served[agent] = self.workspace_served[ws] = self._turn

    def ended(self, agent: UUID) -> None:
        """A push of ``agent`` ended: its slot is free."""
        left = self.inflight.get(agent, 0) - 1
        if left > 0:
            self.inflight[agent] = left
        else:
            self.inflight.pop(agent, None)

    def wanting(self, agents: Mapping[UUID, UUID]) -> None:
        """The agents (with their workspaces) that have due tasks now, as the last look found them."""
        self.workspace_of.update(agents)
        self.due = set(agents)

    def order(self, agent: UUID) -> tuple[int, int]:
        """Sort key: least recently served workspace first, then agent (never served: first)."""
        ws = self.workspace_of.get(agent)
        return self.workspace_served.get(ws, 0) if ws is not None else 0, self.agent_served.get(agent, 0)

    def allotments(self, *, all_want: bool = False) -> dict[UUID, float]:
        """Each wanting agent's fair share of the slots (``all_want``: agents with pushes in flight want more too)."""
        demands = dict.fromkeys(self.due, UNBOUNDED)
        for agent, n in self.inflight.items():
            demands.setdefault(agent, UNBOUNDED if all_want else float(n))
        return self._split(demands, {})

    def room(self, agent: UUID, allotments: Mapping[UUID, float]) -> int:
        """How many more pushes ``agent`` may start within its share (0 when it holds its share or more)."""
        share = allotments.get(agent)
        return 0 if share is None else max(0, math.ceil(share) - self.inflight.get(agent, 0))

    def newcomer_room(self) -> int:
        """The share of an agent the process has not seen yet, as if it came with a workspace of its own."""
        demands = dict.fromkeys((*self.due, *self.inflight, NEWCOMER), UNBOUNDED)
        return math.ceil(self._split(demands, {NEWCOMER: NEWCOMER}).get(NEWCOMER, 0.0))

    def _split(self, demands: Mapping[UUID, float], workspaces: Mapping[UUID, UUID]) -> dict[UUID, float]:
        """Split the slots among workspaces, then each workspace's part among its agents; a lone one is capped."""
        cap = self.capacity - headroom(self.capacity)
        groups: dict[UUID, dict[UUID, float]] = {}
        for agent, want in demands.items():
            ws = workspaces.get(agent) or self.workspace_of.get(agent, agent)
            groups.setdefault(ws, {})[agent] = want
        parts = waterfill(float(self.capacity), {ws: sum(d.values()) for ws, d in groups.items()})
        shares: dict[UUID, float] = {}
        for ws, agents in groups.items():
            shares.update(waterfill(min(parts[ws], cap), agents))
        return {a: min(s, cap) for a, s in shares.items()}
