"""The role hierarchy owner > admin > member over members and their API keys, and the last owner's safety.

Every matrix runs one action for each (caller role, target role) pair against a fresh target, so a cell
never depends on another, and compares the whole table: a failure shows at once who was let in or kept
out wrongly. A refused action must also leave no trace (no key, no role change, nothing revoked).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from autopilot import workspaces
from hookgate.context import Context
from tests import factories
from tests.factories import bearer

ROLES = ("owner", "admin", "member")
PAIRS = list(itertools.product(ROLES, ROLES))  # (caller role, target role)
MEMBERS_ONLY = "/v1/members"


def table(rows: dict[str, tuple[int, int, int]]) -> dict[tuple[str, str], int]:
    """``{caller: (vs owner, vs admin, vs member)}`` as ``{(caller, target): status}``."""
    return {(caller, target): status for caller, row in rows.items() for target, status in zip(ROLES, row, strict=True)}


# Who may act on another member's keys, or disable them: the caller's role must be at least the target's.
CREATE_MEMBER = table({"owner": (201, 201, 201), "admin": (403, 201, 201), "member": (403, 403, 403)})
CREATE_KEY = table({"owner": (201, 201, 201), "admin": (403, 201, 201), "member": (403, 403, 403)})
READ_KEYS = table({"owner": (200, 200, 200), "admin": (403, 200, 200), "member": (403, 403, 403)})
REVOKE_KEY = READ_KEYS
DISABLE = READ_KEYS
# Changing a role: {caller: {target: (to owner, to admin, to member)}}: nobody grants above their own role.
CHANGE_ROLE = {
    "owner": {"owner": (200, 200, 200), "admin": (200, 200, 200), "member": (200, 200, 200)},
    "admin": {"owner": (403, 403, 403), "admin": (403, 200, 200), "member": (403, 200, 200)},
    "member": {"owner": (403, 403, 403), "admin": (403, 403, 403), "member": (403, 403, 403)},
}


@dataclass
class Target:
    """A fresh member of the workspace with one live key."""

    id: str
    role: str
    key_id: str
    key: str


@dataclass
class Crew:
    """A workspace with one caller per role (the owner is the bootstrap owner) and another workspace."""

    ctx: Context
    world: factories.World
    keys: dict[str, str]
    ids: dict[str, str]
    outsider: factories.World

    def h(self, role: str) -> dict[str, str]:
        """Headers of the caller with this role."""
        return bearer(self.keys[role])

    async def target(self, role: str, world: factories.World | None = None) -> Target:
        """A new member with ``role`` and a key, made through the domain (not the API under test)."""
        w = world or self.world
        async with self.ctx.pool.acquire() as conn:
            row, key = await workspaces.add_member(conn, w.workspace_id, f"t-{role}", role)
            key_id = await conn.fetchval("SELECT id FROM api_key WHERE member_id = $1", row["id"])
        return Target(str(row["id"]), role, str(key_id), key)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        """One value straight from the database (to check what an answer left behind)."""
        async with self.ctx.pool.acquire() as conn:
            return await conn.fetchval(sql, *args)


@pytest.fixture
async def crew(ctx: Context) -> Crew:
    """The owner (bootstrap), admin and member callers in one workspace; an owner in another workspace."""
    w = await factories.world(ctx, "acme")
    outsider = await factories.world(ctx, "globex")
    keys, ids = {"owner": w.api_key}, {"owner": str(w.owner_id)}
    async with ctx.pool.acquire() as conn:
        for role in ("admin", "member"):
            row, key = await workspaces.add_member(conn, w.workspace_id, f"caller-{role}", role)
            keys[role], ids[role] = key, str(row["id"])
    return Crew(ctx, w, keys, ids, outsider)


async def matrix(crew: Crew, act: Callable[[str, Target], Awaitable[int]]) -> dict[tuple[str, str], int]:
    """``act(caller role, target)``'s status for every (caller role, target role) pair, on fresh targets."""
    return {(caller, role): await act(caller, await crew.target(role)) for caller, role in PAIRS}


async def _live_keys(crew: Crew, member_id: str) -> int:
    return int(await crew.fetchval("SELECT count(*) FROM api_key WHERE member_id = $1 AND revoked_at IS NULL",
                                   member_id))


# ---------------------------------------------------------------------------------------------------
# The matrix: every (caller role, target role) pair over every action
# ---------------------------------------------------------------------------------------------------


async def test_creating_a_member_grants_at_most_the_callers_own_role(client, crew):
    codes = {}
    for caller, role in PAIRS:
        answer = await client.post("/v1/members", headers=crew.h(caller),
                                   json={"name": f"new-{caller}-{role}", "role": role})
        codes[caller, role] = answer.status_code
        if answer.status_code == 403:
            assert answer.json()["error"] == "forbidden"
    assert codes == CREATE_MEMBER
    made = await crew.fetchval("SELECT count(*) FROM member WHERE workspace_id = $1 AND name LIKE 'new-%'",
                               crew.world.workspace_id)
    assert made == sum(1 for status in CREATE_MEMBER.values() if status == 201)


async def test_creating_a_key_for_another_member_needs_a_role_at_least_theirs(client, crew):
    async def create_key(caller: str, target: Target) -> int:
        answer = await client.post(f"/v1/members/{target.id}/keys", headers=crew.h(caller))
        keys = await _live_keys(crew, target.id)
        assert keys == (2 if answer.status_code == 201 else 1), (caller, target.role)
        if answer.status_code == 403:
            assert answer.json()["error"] == "forbidden"
        return answer.status_code

    assert await matrix(crew, create_key) == CREATE_KEY


async def test_listing_another_members_keys_needs_a_role_at_least_theirs(client, crew):
    async def list_keys(caller: str, target: Target) -> int:
        answer = await client.get("/v1/keys", headers=crew.h(caller), params={"member_id": target.id})
        if answer.status_code == 200:
            assert [k["id"] for k in answer.json()["items"]] == [target.key_id], (caller, target.role)
        return answer.status_code

    assert await matrix(crew, list_keys) == READ_KEYS


async def test_reading_another_members_key_needs_a_role_at_least_theirs(client, crew):
    async def read_key(caller: str, target: Target) -> int:
        return (await client.get(f"/v1/keys/{target.key_id}", headers=crew.h(caller))).status_code

    assert await matrix(crew, read_key) == READ_KEYS


async def test_listing_all_keys_shows_only_the_keys_of_members_within_reach(client, crew):
    targets = {role: await crew.target(role) for role in ROLES}
    for caller in ROLES:
        answer = await client.get("/v1/keys", headers=crew.h(caller), params={"limit": 500})
        assert answer.status_code == 200
        seen = {k["member_id"] for k in answer.json()["items"]}
        reachable = {t.id for role, t in targets.items() if READ_KEYS[caller, role] == 200}
        assert seen & {t.id for t in targets.values()} == reachable, caller
        assert crew.ids[caller] in seen, caller  # one's own keys, always


async def test_revoking_another_members_key_needs_a_role_at_least_theirs(client, crew):
    async def revoke(caller: str, target: Target) -> int:
        answer = await client.delete(f"/v1/keys/{target.key_id}", headers=crew.h(caller))
        works = (await client.get("/v1/me", headers=bearer(target.key))).status_code
        assert works == (401 if answer.status_code == 200 else 200), (caller, target.role)
        return answer.status_code

    assert await matrix(crew, revoke) == REVOKE_KEY


async def test_changing_a_role_stays_within_the_callers_own_role(client, crew):
    codes: dict[tuple[str, str, str], int] = {}
    for (caller, role), new in itertools.product(PAIRS, ROLES):
        target = await crew.target(role)
        answer = await client.patch(f"/v1/members/{target.id}", headers=crew.h(caller), json={"role": new})
        codes[caller, role, new] = answer.status_code
        stored = await crew.fetchval("SELECT role FROM member WHERE id = $1", target.id)
        assert stored == (new if answer.status_code == 200 else role), (caller, role, new)
        if answer.status_code == 200:
            assert answer.json()["role"] == new
        else:
            assert answer.json()["error"] == "forbidden", answer.text
    expected = {(caller, role, new): status for caller, row in CHANGE_ROLE.items() for role, statuses in row.items()
                for new, status in zip(ROLES, statuses, strict=True)}
    assert codes == expected


async def test_disabling_a_member_needs_a_role_at_least_theirs_and_stops_their_keys_at_once(client, crew):
    async def disable(caller: str, target: Target) -> int:
        answer = await client.patch(f"/v1/members/{target.id}", headers=crew.h(caller), json={"disabled": True})
        me = await client.get("/v1/me", headers=bearer(target.key))
        if answer.status_code == 200:
            assert answer.json()["disabled_at"] is not None
            assert me.status_code == 401 and me.json()["error"] == "unauthorized", (caller, target.role)
        else:
            assert me.status_code == 200, (caller, target.role)
        return answer.status_code

    assert await matrix(crew, disable) == DISABLE


async def test_re_enabling_a_member_follows_the_same_hierarchy_and_their_keys_work_again(client, crew):
    async def re_enable(caller: str, target: Target) -> int:
        off = await client.patch(f"/v1/members/{target.id}", headers=crew.h("owner"), json={"disabled": True})
        assert off.status_code == 200, off.text
        answer = await client.patch(f"/v1/members/{target.id}", headers=crew.h(caller), json={"disabled": False})
        me = await client.get("/v1/me", headers=bearer(target.key))
        assert me.status_code == (200 if answer.status_code == 200 else 401), (caller, target.role)
        return answer.status_code

    assert await matrix(crew, re_enable) == DISABLE


# ---------------------------------------------------------------------------------------------------
# One's own keys, self-promotion, anonymous and foreign callers
# ---------------------------------------------------------------------------------------------------


async def test_every_role_creates_lists_and_revokes_its_own_keys(client, crew):
    for caller in ROLES:
        made = await client.post(f"/v1/members/{crew.ids[caller]}/keys", headers=crew.h(caller))
        assert made.status_code == 201, (caller, made.text)
        listed = await client.get("/v1/keys", headers=crew.h(caller), params={"member_id": crew.ids[caller]})
        assert listed.status_code == 200
        assert made.json()["id"] in {k["id"] for k in listed.json()["items"]}
        revoked = await client.delete(f"/v1/keys/{made.json()['id']}", headers=crew.h(caller))
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None, caller
        assert (await client.get("/v1/me", headers=bearer(made.json()["api_key"]))).status_code == 401


async def test_nobody_promotes_themselves(client, crew):
    for caller, new in (("admin", "owner"), ("member", "admin"), ("member", "owner")):
        answer = await client.patch(f"/v1/members/{crew.ids[caller]}", headers=crew.h(caller), json={"role": new})
        assert answer.status_code == 403 and answer.json()["error"] == "forbidden", (caller, new, answer.text)
        assert await crew.fetchval("SELECT role FROM member WHERE id = $1", crew.ids[caller]) == caller
    me = (await client.get("/v1/me", headers=crew.h("admin"))).json()
    assert me["role"] == "admin"


async def test_an_admin_may_step_down_but_a_member_may_not_change_themselves(client, crew):
    member = await client.patch(f"/v1/members/{crew.ids['member']}", headers=crew.h("member"), json={"disabled": True})
    assert member.status_code == 403
    admin = await client.patch(f"/v1/members/{crew.ids['admin']}", headers=crew.h("admin"), json={"role": "member"})
    assert admin.status_code == 200 and admin.json()["role"] == "member"
    again = await client.patch(f"/v1/members/{crew.ids['admin']}", headers=crew.h("admin"), json={"role": "admin"})
    assert again.status_code == 403  # the demotion took effect on the very next request


async def test_an_anonymous_caller_gets_401_on_every_member_and_key_action(client, crew):
    target = await crew.target("member")
    calls = [("POST", MEMBERS_ONLY, {"name": "x", "role": "member"}), ("GET", f"/v1/members/{target.id}", None),
             ("PATCH", f"/v1/members/{target.id}", {"role": "admin"}), ("POST", f"/v1/members/{target.id}/keys", None),
             ("GET", "/v1/keys", None), ("GET", f"/v1/keys/{target.key_id}", None),
             ("DELETE", f"/v1/keys/{target.key_id}", None)]
    for headers in ({}, bearer("hgk_" + "A" * 43)):
        for method, path, body in calls:
            answer = await client.request(method, path, headers=headers, json=body)
            assert answer.status_code == 401 and answer.json()["error"] == "unauthorized", (method, path)
    assert await crew.fetchval("SELECT role FROM member WHERE id = $1", target.id) == "member"
    assert await _live_keys(crew, target.id) == 1


async def test_another_workspaces_member_and_key_ids_are_404_like_unknown_ids(client, crew):
    for role in ROLES:
        target = await crew.target(role)
        calls = [("GET", f"/v1/members/{target.id}", None), ("PATCH", f"/v1/members/{target.id}", {"role": "member"}),
                 ("PATCH", f"/v1/members/{target.id}", {"disabled": True}),
                 ("POST", f"/v1/members/{target.id}/keys", None), ("GET", f"/v1/keys/{target.key_id}", None),
                 ("DELETE", f"/v1/keys/{target.key_id}", None)]
        for method, path, body in calls:
            answer = await client.request(method, path, headers=crew.outsider.auth, json=body)
            assert answer.status_code == 404 and answer.json()["error"] == "not_found", (role, method, path)
        listed = await client.get("/v1/keys", headers=crew.outsider.auth, params={"member_id": target.id})
        assert listed.status_code == 200 and listed.json()["items"] == []
        assert await crew.fetchval("SELECT role FROM member WHERE id = $1", target.id) == role
        assert await _live_keys(crew, target.id) == 1
    unknown = await client.patch("/v1/members/00000000-0000-0000-0000-000000000000", headers=crew.h("owner"),
                                 json={"role": "member"})
    assert unknown.status_code == 404 and unknown.json()["error"] == "not_found"


async def test_member_changes_are_audited_with_the_actor(client, crew):
    target = await crew.target("member")
    await client.patch(f"/v1/members/{target.id}", headers=crew.h("admin"), json={"role": "admin"})
    await client.patch(f"/v1/members/{target.id}", headers=crew.h("owner"), json={"disabled": True})
    await client.patch(f"/v1/members/{target.id}", headers=crew.h("owner"), json={"disabled": False})
    await client.patch(f"/v1/members/{target.id}", headers=crew.h("owner"), json={"role": "admin"})  # no change
    await client.patch(f"/v1/members/{target.id}", headers=crew.h("member"), json={"role": "member"})  # refused
    audit = (await client.get("/v1/audit", headers=crew.h("owner"), params={"subject_id": target.id})).json()
    entries = [(a["action"], a["actor_id"], a["detail"]) for a in audit["items"]]
    assert entries == [
        ("MEMBER_ENABLE", crew.ids["owner"], {}),
        ("MEMBER_DISABLE", crew.ids["owner"], {}),
        ("MEMBER_ROLE", crew.ids["admin"], {"from": "member", "to": "admin"}),
    ]


async def test_a_patch_refuses_unknown_fields_and_bad_roles(client, crew):
    target = await crew.target("member")
    for body in ({"role": "root"}, {"disabled": "yes please"}, {"name": "renamed"}):
        answer = await client.patch(f"/v1/members/{target.id}", headers=crew.h("owner"), json=body)
        assert answer.status_code == 422 and answer.json()["error"] == "invalid_request", body


# ---------------------------------------------------------------------------------------------------
# The last owner
# ---------------------------------------------------------------------------------------------------


def _last_owner(answer: httpx.Response) -> None:
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "last_owner"


async def test_the_last_active_owner_cannot_demote_or_disable_themselves(client, crew):
    me = f"/v1/members/{crew.ids['owner']}"
    for body in ({"role": "admin"}, {"role": "member"}, {"disabled": True}, {"role": "admin", "disabled": True}):
        _last_owner(await client.patch(me, headers=crew.h("owner"), json=body))
    row = (await client.get(me, headers=crew.h("owner"))).json()
    assert (row["role"], row["disabled_at"]) == ("owner", None)


async def test_the_last_active_owner_cannot_revoke_their_last_live_key(client, crew):
    spare = await client.post(f"/v1/members/{crew.ids['owner']}/keys", headers=crew.h("owner"))
    assert spare.status_code == 201
    first = await client.delete(f"/v1/keys/{spare.json()['id']}", headers=crew.h("owner"))
    assert first.status_code == 200  # another live key is left
    key_id = (await client.get("/v1/me", headers=crew.h("owner"))).json()["key_id"]
    _last_owner(await client.delete(f"/v1/keys/{key_id}", headers=crew.h("owner")))
    assert (await client.get("/v1/me", headers=crew.h("owner"))).status_code == 200


async def test_a_disabled_owner_does_not_count_and_a_second_owner_frees_the_first(client, crew):
    second = await crew.target("owner")
    off = await client.patch(f"/v1/members/{second.id}", headers=crew.h("owner"), json={"disabled": True})
    assert off.status_code == 200
    _last_owner(await client.patch(f"/v1/members/{crew.ids['owner']}", headers=crew.h("owner"), json={"role": "admin"}))
    on = await client.patch(f"/v1/members/{second.id}", headers=crew.h("owner"), json={"disabled": False})
    assert on.status_code == 200
    # With a second active owner the first may step down; then the second is the last one.
    down = await client.patch(f"/v1/members/{crew.ids['owner']}", headers=bearer(crew.keys["owner"]),
                              json={"role": "admin"})
    assert down.status_code == 200 and down.json()["role"] == "admin"
    _last_owner(await client.patch(f"/v1/members/{second.id}", headers=bearer(second.key), json={"disabled": True}))
    _last_owner(await client.delete(f"/v1/keys/{second.key_id}", headers=bearer(second.key)))


async def test_another_owner_cannot_lock_out_the_last_owner_with_a_live_key(client, crew):
    # The second owner has no live key: the workspace's only way in is the first owner's key.
    second = await crew.target("owner")
    assert (await client.delete(f"/v1/keys/{second.key_id}", headers=crew.h("owner"))).status_code == 200
    demote = await client.patch(f"/v1/members/{crew.ids['owner']}", headers=crew.h("owner"), json={"role": "member"})
    _last_owner(demote)


async def test_refusals_by_hierarchy_come_before_the_last_owner_rule(client, crew):
    answer = await client.patch(f"/v1/members/{crew.ids['owner']}", headers=crew.h("admin"), json={"disabled": True})
    assert answer.status_code == 403 and answer.json()["error"] == "forbidden"


async def test_two_concurrent_demotions_of_the_last_two_owners_never_both_succeed(client, crew):
    for round_ in range(12):
        w = await factories.world(crew.ctx, f"race-{round_}")
        second = await crew.target("owner", w)
        first_key = w.api_key
        answers = await asyncio.gather(
            client.patch(f"/v1/members/{w.owner_id}", headers=bearer(first_key), json={"role": "admin"}),
            client.patch(f"/v1/members/{second.id}", headers=bearer(second.key), json={"role": "admin"}),
        )
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [200, 409], (round_, [a.text for a in answers])
        owners = await crew.fetchval(
            "SELECT count(*) FROM member WHERE workspace_id = $1 AND role = 'owner' AND disabled_at IS NULL",
            w.workspace_id)
        assert owners == 1, round_


async def test_a_concurrent_demotion_and_key_revocation_leave_an_owner_who_can_sign_in(client, crew):
    for round_ in range(12):
        w = await factories.world(crew.ctx, f"race-key-{round_}")
        second = await crew.target("owner", w)
        first_key_id = (await client.get("/v1/me", headers=bearer(w.api_key))).json()["key_id"]
        await asyncio.gather(
            client.patch(f"/v1/members/{second.id}", headers=bearer(second.key), json={"role": "member"}),
            client.delete(f"/v1/keys/{first_key_id}", headers=bearer(w.api_key)),
        )
        can_sign_in = await crew.fetchval(
            "SELECT count(*) FROM member m WHERE m.workspace_id = $1 AND m.role = 'owner' AND m.disabled_at IS NULL"
            " AND EXISTS (SELECT 1 FROM api_key k WHERE k.member_id = m.id AND k.revoked_at IS NULL)", w.workspace_id)
        assert can_sign_in == 1, round_
