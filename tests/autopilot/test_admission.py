import asyncio
from dataclasses import replace

from autopilot import admission, payload_filter
from tests import factories


async def _setup(ctx, mode="run_only", pull=False):
    s = await factories.small(ctx, mode=mode, pull=pull)
    return s.world, s.agent, s.autopilot, s.trigger


async def test_admitted_run_is_pending_and_accountable_to_the_trigger_publisher(ctx, conn):
    w, _, ap, trigger = await _setup(ctx)
    result = await admission.admit(conn, autopilot_id=ap["id"], trigger_id=trigger["id"], source="webhook",
                                   payload={"event": "x"}, heartbeat_timeout_s=120.0)
    run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", result.run_id)
    assert result.created and run["status"] == "pending"
    assert run["accountable_id"] == w.owner_id and run["originator_id"] is None
    assert run["rule_version_id"] is not None


async def test_paused_autopilot_gives_a_skipped_run_with_reason(ctx, conn):
    _, _, ap, trigger = await _setup(ctx)
    await conn.execute("UPDATE autopilot SET status = 'paused' WHERE id = $1", ap["id"])
    result = await admission.admit(conn, autopilot_id=ap["id"], trigger_id=trigger["id"], source="webhook",
                                   payload={}, heartbeat_timeout_s=120.0)
    assert (result.status, result.reason_code) == ("skipped", "autopilot_paused")


async def test_run_only_with_an_offline_pull_runtime_is_skipped_but_create_issue_is_admitted(ctx, conn):
    _, _, ap, trigger = await _setup(ctx, pull=True)
    skipped = await admission.admit(conn, autopilot_id=ap["id"], trigger_id=trigger["id"], source="webhook",
                                    payload={}, heartbeat_timeout_s=120.0)
    assert skipped.reason_code == "runtime_offline"
    await conn.execute("UPDATE autopilot SET execution_mode = 'create_issue' WHERE id = $1", ap["id"])
    admitted = await admission.admit(conn, autopilot_id=ap["id"], trigger_id=trigger["id"], source="webhook",
                                     payload={}, heartbeat_timeout_s=120.0)
    assert admitted.status == "pending"


async def test_manual_run_records_the_clicker_and_refuses_a_non_writer(ctx, conn):
    from autopilot import workspaces

    w, _, ap, _ = await _setup(ctx)
    outsider, _ = await workspaces.add_member(conn, w.workspace_id, "bob", "member")
    refused = await admission.admit(conn, autopilot_id=ap["id"], source="manual", payload={},
                                    clicker_id=outsider["id"], heartbeat_timeout_s=120.0)
    assert refused.reason_code == "actor_forbidden"
    ok = await admission.admit(conn, autopilot_id=ap["id"], source="manual", payload={}, clicker_id=w.owner_id,
                               heartbeat_timeout_s=120.0)
    run = await conn.fetchrow("SELECT * FROM autopilot_run WHERE id = $1", ok.run_id)
    assert run["originator_id"] == w.owner_id == run["accountable_id"]


async def test_squad_assignee_resolves_to_its_leader(ctx, conn):
    from autopilot import agents

    w = await factories.world(ctx)
    leader = await factories.http_agent(w, name="leader")
    squad = await agents.create_squad(conn, workspace_id=w.workspace_id, name="sq", leader_id=leader.row["id"],
                                      member_ids=[])
    ap = await factories.autopilot(w, squad["id"], assignee_type="squad")
    facts = await admission.decide(conn, autopilot_id=ap["id"], trigger_id=None, source="api",
                                   heartbeat_timeout_s=120.0)
    assert facts.reason_code is None
    await conn.execute("UPDATE agent SET archived_at = now() WHERE id = $1", leader.row["id"])
    facts = await admission.decide(conn, autopilot_id=ap["id"], trigger_id=None, source="api",
                                   heartbeat_timeout_s=120.0)
    assert facts.reason_code == "agent_archived"


async def test_concurrent_admissions_of_one_delivery_make_one_run(ctx):
    _, _, ap, trigger = await _setup(ctx)
    delivery = await factories.delivery(ctx.pool, trigger, signature_status="valid")

    async def one_admission():
        async with ctx.pool.acquire() as conn:
            return await admission.admit(conn, autopilot_id=ap["id"], trigger_id=trigger["id"], source="webhook",
                                         payload={}, delivery_id=delivery, heartbeat_timeout_s=120.0)

    results = await asyncio.gather(*(one_admission() for _ in range(8)))
    assert len({r.run_id for r in results}) == 1
    assert sum(r.created for r in results) == 1


async def test_admit_many_admits_a_batch_once_and_gives_back_the_runs_already_admitted(ctx, conn):
    from datetime import UTC, datetime

    _, _, ap, trigger = await _setup(ctx)
    plans = [datetime(2030, 1, 1, h, tzinfo=UTC) for h in range(3)]

    def requests(hours):
        return [admission.Request(ap["id"], "schedule", {"h": h}, trigger["id"], planned_at=plans[h]) for h in hours]

    first = await admission.admit_many(conn, requests([0, 1]), heartbeat_timeout_s=120.0)
    again = await admission.admit_many(conn, requests([1, 0, 2]), heartbeat_timeout_s=120.0)
    assert [a.created for a in first] == [True, True] and [a.created for a in again] == [False, False, True]
    assert [again[1].run_id, again[0].run_id] == [a.run_id for a in first]
    assert await conn.fetchval("SELECT count(*) FROM autopilot_run WHERE trigger_id = $1", trigger["id"]) == 3


async def test_each_ignore_reason_comes_first_in_step_9_order_and_has_its_text(ctx, conn):
    _, _, ap, trigger = await _setup(ctx)
    refusing = payload_filter.parse({"path": "/action", "eq": "closed"})
    [facts] = await admission.read_facts(conn, [admission.Request(ap["id"], "webhook", {}, trigger["id"])], 120.0)
    assert facts is not None and admission.why_ignored(facts, "anything", {}) is None
    cases = [
        ({"trigger_deleted": True, "trigger_enabled": False, "autopilot_status": "paused"}, "trigger_deleted"),
        ({"trigger_enabled": False, "autopilot_status": "archived"}, "trigger_disabled"),
        ({"autopilot_status": "paused", "event_filters": ("other.*",)}, "autopilot_paused"),
        ({"autopilot_status": "archived"}, "autopilot_archived"),
        ({"event_filters": ("github.push", "stripe.*"), "payload_filter": refusing}, "event_filtered"),
        ({"payload_filter": refusing}, "payload_filter"),
    ]
    for change, code in cases:
        ignored = admission.why_ignored(replace(facts, **change), "github.pull_request.opened", {"action": "opened"})
        assert ignored is not None and ignored.code == code and ignored.reason
        assert admission.REASONS[code]
    assert admission.why_ignored(replace(facts, event_filters=("GitHub.Pull_Request.*",)),
                                 "github.pull_request.opened", {}) is None
    admitting = payload_filter.parse({"path": "/action", "eq": "opened"})
    assert admission.why_ignored(replace(facts, payload_filter=admitting), "x", {"action": "opened"}) is None
    assert admission.why_ignored(replace(facts, payload_filter=refusing), "x", {"action": "opened"}).reason == (
        'the payload filter does not match: /action is "opened", not equal to "closed"')
