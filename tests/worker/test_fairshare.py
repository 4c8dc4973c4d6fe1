"""The share rule of a worker process's push slots (worker/fairshare.py): whole pushes per agent and per workspace.

Pure arithmetic: each test builds the pusher's view (pushes in flight, agents with due tasks) and claims greedily
within the budget, as the take and the push loop do, then checks what one workspace could hold.
"""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from worker.fairshare import Budget, Shares, headroom

A, B = UUID(int=0xA), UUID(int=0xB)


def _greedy(budget: Budget, wants: list[tuple[UUID, UUID]], free: int) -> dict[UUID, int]:
    """Claim one push at a time for each (agent, workspace) in turn while budget and ``free`` allow; per workspace."""
    got: dict[UUID, int] = {}
    progress = True
    while progress and free > 0:
        progress = False
        for agent, ws in wants:
            if free > 0 and budget.room(agent, ws) > 0:
                budget.spend(agent, ws, 1)
                got[ws] = got.get(ws, 0) + 1
                free -= 1
                progress = True
    return got


@pytest.mark.parametrize("capacity", [2, 8, 16, 64, 256])
@pytest.mark.parametrize("newcomers", [1, 2, 5, 40])
def test_newcomers_of_one_workspace_never_take_the_headroom(capacity: int, newcomers: int) -> None:
    shares = Shares(capacity)
    got = _greedy(shares.budget(all_want=True), [(uuid4(), B) for _ in range(newcomers)], capacity)
    assert got.get(B, 0) == capacity - headroom(capacity)


@pytest.mark.parametrize("capacity", [8, 16, 256])
@pytest.mark.parametrize("agents", [3, 5, 7, 9])
def test_known_agents_of_one_workspace_share_its_part_without_rounding_past_it(capacity: int, agents: int) -> None:
    shares = Shares(capacity)
    mine = [uuid4() for _ in range(agents)]
    shares.wanting(dict.fromkeys(mine, B))
    for all_want in (False, True):
        got = _greedy(shares.budget(all_want=all_want), [(a, B) for a in mine], capacity)
        assert got[B] == capacity - headroom(capacity), all_want


def test_new_agents_of_a_known_workspace_share_that_workspaces_room() -> None:
    shares = Shares(16)
    known = uuid4()
    for _ in range(10):  # B's known agent holds 10 pushes
        shares.started(known, B)
    got = _greedy(shares.budget(all_want=True), [(uuid4(), B) for _ in range(5)], 16 - 10)
    assert got[B] == 14 - 10


def test_a_workspace_holding_its_lone_part_leaves_the_headroom_to_an_arriving_one() -> None:
    shares = Shares(16)
    hanging = [uuid4() for _ in range(5)]
    for i in range(14):
        shares.started(hanging[i % 5], B)
    shares.wanting(dict.fromkeys(hanging, B) | {(a := uuid4()): A})
    budget = shares.budget()
    assert budget.room(a, A) == 8  # its part; the two free slots go to it at once
    assert all(budget.room(h, B) == 0 for h in hanging)  # B is over its part now: nothing more
    take = shares.budget(all_want=True)
    assert take.space_other is not None and take.space_other >= 2  # the same for a workspace not seen yet
    assert all(take.room(uuid4(), B) == 0 for _ in range(3))  # and B's new agents get nothing either


def test_two_workspaces_split_the_slots_and_each_splits_its_part_among_its_agents() -> None:
    shares = Shares(16)
    many = [uuid4() for _ in range(6)]
    one = uuid4()
    shares.wanting(dict.fromkeys(many, B) | {one: A})
    got = _greedy(shares.budget(), [(a, B) for a in many] + [(one, A)], 16)
    assert got == {B: 8, A: 8}


def test_a_newcomer_workspace_gets_a_part_as_one_workspace_whatever_its_agents() -> None:
    shares = Shares(16)
    busy = uuid4()
    shares.wanting({busy: A})
    budget = shares.budget(all_want=True)
    assert budget.agent_other == budget.space_other == 8
    got = _greedy(budget, [(uuid4(), B) for _ in range(5)], 16)
    assert got[B] == 8


def test_a_single_slot_has_no_headroom() -> None:
    got = _greedy(Shares(1).budget(all_want=True), [(uuid4(), B) for _ in range(3)], 1)
    assert got == {B: 1}


def test_the_take_arguments_list_known_agents_and_workspaces_with_their_rooms() -> None:
    shares = Shares(16)
    agent = uuid4()
    shares.started(agent, B)
    agents, rooms, agent_other, spaces, space_rooms, space_other = shares.budget(all_want=True).take_args()
    assert (agents, rooms, spaces, space_rooms) == ([agent], [13], [B], [13])
    assert agent_other == space_other == 8  # a newcomer beside B: half of the slots
