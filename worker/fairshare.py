"""Fair shares of one worker process's push slots: workspaces first, then agents within each workspace.

A worker process pushes at most ``capacity`` tasks at once (``push_inflight``, never more than
``push_connections``, so that no push ever waits for an HTTP connection another agent's push holds). Those slots
are split by max-min fairness: the workspaces that want pushes (an agent with due tasks, or pushes in flight)
get equal parts, a workspace that needs less than its part leaving the rest to the others; each workspace's part
is split the same way among its agents. What an agent wants: without bound while it has due tasks (or while the
take is about to make some), else the pushes it has in flight. A workspace alone, whatever the number of its
agents, new or known, never gets the last ``headroom`` slots (an eighth of them, at least one), so that another
workspace that arrives while this one hangs finds slots free at once instead of waiting for the hanging pushes
to time out.

Shares become whole numbers of pushes, a :class:`Budget`: per agent and per workspace, how many more may start.
A claim takes no more than both allow, so the agents of one workspace, however many, stay within the
workspace's part; an agent or a workspace the process has not seen yet (the take meets them) gets the room of
a workspace of its own, and the newcomers of one workspace share that workspace's room. Shares are checked when
tasks are claimed (a push is never cut): a workspace whose pushes took its part while it was alone keeps them
until they end, and meanwhile the others share what is free.
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
class Budget:
    """How many more pushes each agent and each workspace may start now; ``None`` keys: one not seen yet."""

    agents: dict[UUID, int]
    spaces: dict[UUID, int]
    #: The room of an agent, and of a workspace, that are not in the maps (None: no bound).
    agent_other: int | None = None
    space_other: int | None = None

    def room(self, agent: UUID, workspace: UUID) -> int:
        """How many pushes of ``agent`` (of ``workspace``) may start: within both the agent's and the workspace's."""
        rooms = (self.agents.get(agent, self.agent_other), self.spaces.get(workspace, self.space_other))
        bounded = [r for r in rooms if r is not None]
        return max(0, min(bounded)) if bounded else UNBOUNDED_ROOM

    def spend(self, agent: UUID, workspace: UUID, n: int) -> None:
        """``n`` pushes of ``agent`` (of ``workspace``) started: less room for both."""
        if (room := self.agents.get(agent, self.agent_other)) is not None:
            self.agents[agent] = room - n
        if (room := self.spaces.get(workspace, self.space_other)) is not None:
            self.spaces[workspace] = room - n

    def take_args(self) -> tuple[list[UUID], list[int], int | None, list[UUID], list[int], int | None]:
        """The take's arguments: agents, their rooms, any other agent's; workspaces, their rooms, any other's."""
        return (list(self.agents), list(self.agents.values()), self.agent_other,
                list(self.spaces), list(self.spaces.values()), self.space_other)


#: The room of a claim with no budget: as many as its other bounds allow.
UNBOUNDED_ROOM = 1 << 30


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

    @property
    def turn(self) -> int:
        """How many pushes have started: a budget made before the latest start may allow too much."""
        return self._turn

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

    def held(self) -> dict[UUID, int]:
        """Pushes in flight by workspace."""
        per: dict[UUID, int] = {}
        for agent, n in self.inflight.items():
            ws = self.workspace_of.get(agent, agent)
            per[ws] = per.get(ws, 0) + n
        return per

    def budget(self, *, all_want: bool = False) -> Budget:
        """Each wanting agent's and workspace's room (``all_want``: agents with pushes in flight want more too).

        With ``all_want`` (the take, which may meet agents and workspaces not seen yet) an unknown agent gets the
        room of a newcomer with a workspace of its own, and so does an unknown workspace as a whole.
        """
        demands = dict.fromkeys(self.due, UNBOUNDED)
        for agent, n in self.inflight.items():
            demands.setdefault(agent, UNBOUNDED if all_want else float(n))
        parts, shares = self._split(demands, {})
        held = self.held()
        budget = Budget({a: math.ceil(s) - self.inflight.get(a, 0) for a, s in shares.items()},
                        {ws: math.ceil(p) - held.get(ws, 0) for ws, p in parts.items()})
        if all_want:
            budget.agent_other = budget.space_other = self.newcomer_room()
        return budget

    def newcomer_room(self) -> int:
        """The share of an agent the process has not seen yet, as if it came with a workspace of its own."""
        demands = dict.fromkeys((*self.due, *self.inflight, NEWCOMER), UNBOUNDED)
        return math.ceil(self._split(demands, {NEWCOMER: NEWCOMER})[1].get(NEWCOMER, 0.0))

    def _split(self, demands: Mapping[UUID, float],
               workspaces: Mapping[UUID, UUID]) -> tuple[dict[UUID, float], dict[UUID, float]]:
        """Split the slots among workspaces, each part capped for a lone one, then each part among its agents.

        Returns the workspaces' parts and the agents' shares.
        """
        cap = self.capacity - headroom(self.capacity)
        groups: dict[UUID, dict[UUID, float]] = {}
        for agent, want in demands.items():
            ws = workspaces.get(agent) or self.workspace_of.get(agent, agent)
            groups.setdefault(ws, {})[agent] = want
        parts = {ws: min(p, cap) for ws, p in
                 waterfill(float(self.capacity), {ws: sum(d.values()) for ws, d in groups.items()}).items()}
        shares: dict[UUID, float] = {}
        for ws, agents in groups.items():
            shares.update(waterfill(parts[ws], agents))
        return parts, shares
