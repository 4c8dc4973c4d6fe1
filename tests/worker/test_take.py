"""The take (``delivery_take``): claim and dispatch in one statement, what the hot path must keep guaranteeing."""

import asyncio
import logging
import re
import time
import uuid
from datetime import timedelta

from starlette.responses import JSONResponse

from autopilot import dispatch
from hookgate import database, notify
from hookgate.context import open_context
from hookgate.notify import NotifyListener
from sql import Q
from tests import factories
from tests.conftest import make_settings
from tests.plans import logged_plans
from tests.worker.conftest import FAST, UNPACED, add_delivery, agent_world, bulk_deliveries, wait_for
from worker import take, watchdog
from worker.deliveries import DeliveryWorker, options_for
from worker.push import Pusher


async def _setup(wctx, agent_server, **agent_kw):
    s = await agent_world(wctx, agent_server.url("a"), name="a", autopilot={"title": "plain"}, trigger=UNPACED,
                          **agent_kw)
    return s.world, s.agent, s.autopilot, s.trigger


async def test_one_statement_dispatches_plain_runs_with_tasks_born_claimed_within_the_cap(wctx, agent_server):
    w, agent, ap, trigger = await _setup(wctx, agent_server, max_concurrency=2)
    with_issue = await factories.autopilot(w, agent.row["id"], mode="create_issue", title="issue")
    t_issue, _ = await factories.webhook_trigger(w, with_issue, **UNPACED)
    async with wctx.pool.acquire() as conn:
        fast = [await add_delivery(conn, ap, trigger) for _ in range(3)]
        unusual = [await add_delivery(conn, with_issue, t_issue), await add_delivery(conn, ap, trigger, admit=False)]
    release = asyncio.Event()

    async def hold(_n, _hit):
        await release.wait()
        return JSONResponse({"ok": True})

    agent_server.behaviours["a"] = hold  # the pushes wait, so the state right after the take can be read
    pusher = Pusher(wctx, holder="t1")
    worker = DeliveryWorker(wctx, holder="t1", pusher=pusher)
    listener = await database.connect(wctx.dsn)
    listener_hits: list[str] = []
    await listener.add_listener("hookgate_tasks", lambda *a: listener_hits.append(a[3]))
    try:
        taken = await worker.take_batch(limit=10)
        await asyncio.sleep(0.2)
    finally:
        await listener.close()
    async with wctx.pool.acquire() as conn:
        fast_runs = [run for _, run in fast]
        tasks = await conn.fetch("SELECT id, run_id, status, attempt, lease_token, holder_instance, idempotency_key "
                                 "FROM agent_task WHERE run_id = ANY($1)", fast_runs)
        runs = {r["id"]: r for r in await conn.fetch("SELECT id, status, task_id FROM autopilot_run "
                                                     "WHERE id = ANY($1)", fast_runs)}
        claims = await conn.fetch("SELECT subject_id, actor_id, detail FROM audit_log WHERE action = 'CLAIM'")
        delivered = await conn.fetch("SELECT status, lease_token, lease_expires_at FROM webhook_delivery "
                                     "WHERE id = ANY($1)", [d for d, _ in fast])
        left = await conn.fetch("SELECT id, status, lease_token FROM webhook_delivery WHERE id = ANY($1)",
                                [d for d, _ in unusual])
    assert taken.dispatched == 3 and len(taken.claimed) == 2  # the agent's cap: two slots
    assert sorted(t["idempotency_key"] for t in tasks) == sorted(f"run:{r}:1" for r in fast_runs)  # one per run
    running = [t for t in tasks if t["status"] == "running"]
    queued = [t for t in tasks if t["status"] == "queued"]
    assert len(running) == 2 and len(queued) == 1
    assert all(t["attempt"] == 1 and t["holder_instance"] == "t1" and t["lease_token"] for t in running)
    assert queued[0]["attempt"] == 0 and queued[0]["lease_token"] is None
    assert {c.lease_token for c in taken.claimed} == {t["lease_token"] for t in running}
    assert all(runs[t["run_id"]]["task_id"] == t["id"] for t in tasks)
    assert sorted(runs[t["run_id"]]["status"] for t in tasks) == ["queued", "running", "running"]
    assert sorted(c["subject_id"] for c in claims) == sorted(str(t["id"]) for t in running)
    assert all(c["actor_id"] == "t1" and c["detail"]["attempt"] == 1 for c in claims)
    assert all(d["status"] == "dispatched" and d["lease_token"] is None and d["lease_expires_at"] is None
               for d in delivered)
    assert listener_hits == [str(queued[0]["id"])]  # the task left queued is announced
    # The unusual ones come back leased (guarded by their token) for the one-by-one path.
    assert {r.id for r in taken.leased} == {d for d, _ in unusual}
    tokens = {r.id: r.lease_token for r in taken.leased}
    assert all(r["status"] == "queued" and r["lease_token"] == tokens[r["id"]] for r in left)
    assert await worker.dispatch_leased(taken.leased) == ["dispatched", "dispatched"]
    release.set()
    await asyncio.gather(*pusher._inflight)
    await pusher.stop(deadline=5)
    async with wctx.pool.acquire() as conn:
        done = await conn.fetch("SELECT t.status, r.status AS run FROM agent_task t "
                                "JOIN autopilot_run r ON r.id = t.run_id WHERE t.id = ANY($1)",
                                [c.id for c in taken.claimed])
    assert {(r["status"], r["run"]) for r in done} == {("succeeded", "completed")}
    assert len(agent_server.of("a")) == 2


async def test_a_run_held_by_another_dispatcher_is_leased_not_dispatched_twice(wctx, agent_server):
    _, _, ap, trigger = await _setup(wctx, agent_server)
    async with wctx.pool.acquire() as conn:
        delivery_id, run_id = await add_delivery(conn, ap, trigger)
    worker = DeliveryWorker(wctx, holder="t1")
    async with wctx.pool.acquire() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM autopilot_run WHERE id = $1 FOR UPDATE", run_id)
        taken = await worker.take_batch()
    assert taken.dispatched == 0 and [r.id for r in taken.leased] == [delivery_id]
    assert await worker.dispatch_leased(taken.leased) == ["dispatched"]
    async with wctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 1


async def test_an_existing_task_for_the_run_attempt_is_not_made_again(wctx, agent_server):
    _, agent, ap, trigger = await _setup(wctx, agent_server)
    async with wctx.pool.acquire() as conn:
        delivery_id, run_id = await add_delivery(conn, ap, trigger)
        # A task for the run's first attempt exists although the run does not point at it (made elsewhere).
        existing = await conn.fetchval(
            "INSERT INTO agent_task (workspace_id, run_id, agent_id, payload, idempotency_key) "
            "VALUES ($1, $2, $3, '{}', $4) RETURNING id", ap["workspace_id"], run_id, agent.row["id"],
            f"run:{run_id}:1")
    worker = DeliveryWorker(wctx, holder="t1", pusher=Pusher(wctx, holder="t1"))
    taken = await worker.take_batch()
    assert taken.dispatched == 0 and taken.claimed == [] and [r.id for r in taken.leased] == [delivery_id]
    async with wctx.pool.acquire() as conn:
        slots = await conn.fetchval("SELECT count(*) FROM agent_slot WHERE lease_token IS NOT NULL")
        claims = await conn.fetchval("SELECT count(*) FROM audit_log WHERE action = 'CLAIM'")
    assert slots == 0 and claims == 0  # the slot it locked for that task was not given away
    assert await worker.dispatch_leased(taken.leased) == ["dispatched"]
    async with wctx.pool.acquire() as conn:
        assert await conn.fetchval("SELECT task_id FROM autopilot_run WHERE id = $1", run_id) == existing
        assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 1
    await worker.pusher.stop(deadline=5)


async def test_the_take_keeps_a_quiet_trigger_from_being_starved(wctx, agent_server):
    w, agent, noisy_ap, noisy = await _setup(wctx, agent_server)
    quiet_ap = await factories.autopilot(w, agent.row["id"], title="quiet")
    quiet, _ = await factories.webhook_trigger(w, quiet_ap)
    async with wctx.pool.acquire() as conn:
        await bulk_deliveries(conn, noisy_ap, noisy, 500)
        quiet_delivery, _ = await add_delivery(conn, quiet_ap, quiet)
        worker = DeliveryWorker(wctx, holder="t")
        taken = await worker.take_batch(limit=4)
        status = await conn.fetchval("SELECT status FROM webhook_delivery WHERE id = $1", quiet_delivery)
    assert taken.dispatched == 4 and status == "dispatched"


async def test_a_take_that_fails_is_logged_and_its_deliveries_are_dispatched_on_a_later_pass(
        wctx, agent_server, caplog):
    _, _, ap, trigger = await _setup(wctx, agent_server)
    async with wctx.pool.acquire() as conn:
        _, run_id = await add_delivery(conn, ap, trigger)
        await add_delivery(conn, ap, trigger, admit=False)  # crash window: the one-by-one path
    blocker = await database.connect(wctx.dsn)
    # A real failure of the statement: the pacing table is locked by another transaction and the worker's
    # connections stop waiting for a lock after 100 ms (lock_timeout), so the take fails with 55P03.
    async with open_context(wctx.settings, migrate=False, server_settings={"lock_timeout": "100ms"}) as ctx:
        pusher = Pusher(ctx, holder="t")
        worker = DeliveryWorker(ctx, holder="t", pusher=pusher)
        blocking = blocker.transaction()
        await blocking.start()
        await blocker.execute("LOCK TABLE trigger_pace IN EXCLUSIVE MODE")
        runner = asyncio.create_task(worker.run())
        try:
            with caplog.at_level(logging.WARNING, logger="hookgate.deliveries"):
                await wait_for(lambda: _failed_takes(caplog, 2))
            async with ctx.pool.acquire() as conn:
                assert await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE status = 'queued' "
                                           "AND lease_token IS NULL") == 2  # the failed takes wrote nothing
            assert not runner.done()
            await blocking.rollback()

            async def dispatched() -> bool:
                async with ctx.pool.acquire() as conn:
                    return await conn.fetchval("SELECT count(*) FROM webhook_delivery WHERE status = 'dispatched'") == 2
            await wait_for(dispatched)
        finally:
            await worker.stop()
            await runner
            await blocker.close()
        await asyncio.gather(*pusher._inflight)
        await pusher.stop(deadline=5)
        async with ctx.pool.acquire() as conn:
            run = await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id)
            tasks = await conn.fetchval("SELECT count(*) FROM agent_task")
    assert run == "completed" and tasks == 2


async def _failed_takes(caplog, n: int) -> bool:
    failed = [r for r in caplog.records if r.name == "hookgate.deliveries" and r.levelno == logging.WARNING
              and "take failed" in r.getMessage() and "lock timeout" in getattr(r, "error", "")]
    return len(failed) >= n


async def test_a_push_success_after_the_lease_was_lost_is_recorded_not_applied(wctx, agent_server):
    _, _, ap, trigger = await _setup(wctx, agent_server)
    async with wctx.pool.acquire() as conn:
        _, run_id = await add_delivery(conn, ap, trigger)
        options = dispatch.Options(claim=dispatch.ClaimFor("t1"), heartbeat_timeout_s=120.0)
        taken = await take.take_batch(conn, limit=8, lease_s=120, cursor=None, fanout=16, options=options,
                                      capacity=1)
        [claimed] = taken.claimed
        later = await conn.fetchval("SELECT now() + interval '1 hour'")
        await watchdog.sweep(conn, now=later - timedelta(minutes=1), heartbeat_timeout_s=120.0)
    pusher = Pusher(wctx, holder="t1")
    assert await pusher.push(claimed) == "done"
    await pusher.stop(deadline=5)
    async with wctx.pool.acquire() as conn:
        task = await conn.fetchval("SELECT status FROM agent_task WHERE id = $1", claimed.id)
        run = await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id)
        late = await conn.fetchval("SELECT count(*) FROM audit_log WHERE action = 'LATE_RESULT' AND subject_id = $1",
                                   str(claimed.id))
    assert task == "queued" and run != "completed" and late == 1


_BIG_TABLES = ("webhook_delivery", "agent_task", "agent_slot", "autopilot_run")


async def test_the_take_keeps_reading_by_index_after_its_plans_were_made_on_small_tables(wctx, agent_server):
    # Generic plans are made once per session, from the statistics of that moment. A worker connection whose
    # first take ran on nearly empty tables must not keep scanning them whole as they grow (the take's SET options).
    _, _, ap, trigger = await _setup(wctx, agent_server, max_concurrency=4096)
    options = options_for(wctx, "t1", Pusher(wctx, holder="t1"))
    conn = await database.connect(wctx.dsn)
    try:
        # No ANALYZE may replan under the test (that would hide a bad plan); a partitioned table's partitions
        # hold its storage (its name still prefixes theirs in a plan's "Seq Scan on ...").
        tables = await conn.fetch(
            "SELECT coalesce(i.inhrelid, t.oid)::regclass::text AS name FROM unnest($1::text[]) AS n "
            "JOIN pg_class t ON t.oid = n::regclass LEFT JOIN pg_inherits i ON i.inhparent = t.oid", _BIG_TABLES)
        for table in tables:
            await conn.execute(f"ALTER TABLE {table['name']} SET (autovacuum_enabled = false)")
        await add_delivery(conn, ap, trigger)
        first = await take.take_batch(conn, limit=32, lease_s=120, cursor=None, fanout=16, options=options,
                                    capacity=64)
        assert first.dispatched == 1  # every statement of the take ran, so each has its plan now
        await bulk_deliveries(conn, ap, trigger, 3000)
        for _ in range(40):  # the tables grow under the cached plans: ~2,500 tasks, runs, audit rows
            await take.take_batch(conn, limit=64, lease_s=120, cursor=None, fanout=16, options=options, capacity=64)
        async with logged_plans(conn, "auto_explain.log_nested_statements = on") as plans:
            taken = await take.take_batch(conn, limit=32, lease_s=120, cursor=None, fanout=16, options=options,
                                        capacity=64)
    finally:
        await conn.close()
    assert taken.dispatched == 32
    text = "\n".join(plans)
    assert "INSERT INTO agent_task" in text and "webhook_delivery" in text  # the take's own statements
    scans = sorted({table for table in _BIG_TABLES if f"Seq Scan on {table}" in text})
    assert scans == [], f"sequential scans of {scans} in the take:\n{text}"
    # A trigger's queue is read in order from webhook_delivery_fair_idx, both keys bound (its head, not its backlog).
    assert re.search(r"Index Cond: \(\(workspace_id = \w+\.workspace_id\) AND \(trigger_id = \w+\.trigger_id\) AND "
                     r"\(available_at <=", text), text


async def test_a_take_starts_only_the_delivery_partitions_its_deliveries_can_be_in(wctx, agent_server):
    # Deliveries are kept in day partitions (forever by default): a statement of the take that reaches its rows
    # by a join key or an array alone would start and probe every partition, one more each day.
    _, _, ap, trigger = await _setup(wctx, agent_server)
    options = options_for(wctx, "t1", Pusher(wctx, holder="t1"))
    conn = await database.connect(wctx.dsn)
    try:
        await conn.fetch("SELECT hookgate_partitions_ensure(now() + interval '40 days')")  # a long history's count
        partitions = await conn.fetchval(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'webhook_delivery'::regclass")
        assert partitions > 40
        named, _ = await add_delivery(conn, ap, trigger)
        await add_delivery(conn, ap, trigger)
        # The second take of each kind runs the plans the connection cached on the first.
        for _ in range(2):
            async with logged_plans(conn, "auto_explain.log_nested_statements = on") as plans:
                by_name = await take.take_batch(conn, limit=32, lease_s=120, cursor=None, fanout=16,
                                                options=options, capacity=64, ids=[named])
                walked = await take.take_batch(conn, limit=32, lease_s=120, cursor=None, fanout=16,
                                               options=options, capacity=64)
            assert by_name.dispatched == 1 and walked.dispatched == 1
            named, _ = await add_delivery(conn, ap, trigger)
            await add_delivery(conn, ap, trigger)
    finally:
        await conn.close()
    # Every statement but the walk's first (the queued range: one probe of each partition's queued index, by
    # design) reads its deliveries within their id range: no other partition is scanned, not even in a plan's
    # never-executed branches. (PostgreSQL 15 still lists every partition as an UPDATE's target.)
    keyed = [plan for plan in plans if "ORDER BY q.id LIMIT 1" not in plan]
    assert any("INSERT INTO agent_task" in plan for plan in keyed) and any("Subplans Removed" in plan for plan in keyed)
    scanned = {m for plan in keyed for m in re.findall(r"Scan(?: Backward)? using \S+ on (webhook_delivery_\w+)", plan)}
    assert len(scanned) <= 1, f"{len(scanned)} of {partitions} delivery partitions scanned:\n" + "\n".join(keyed)


async def test_a_walk_that_wraps_round_reads_the_head_of_its_first_workspace_once(wctx, agent_server):
    # A probe that starts at a workspace's first trigger reads the queue's index past every entry that left the
    # queue since the last vacuum. When the walk wraps round (nothing after its workspace and trigger cursors), it
    # finds the first workspace with due work, and that probe's entry also names the workspace's first trigger:
    # the walk over the triggers starts from it, not from a second probe. (Pulled up into the statement around
    # it, the workspace probe itself once ran twice per take.)
    w, _, ap, trigger = await _setup(wctx, agent_server)
    options = options_for(wctx, "t1", Pusher(wctx, holder="t1"))
    conn = await database.connect(wctx.dsn)
    try:
        for _ in range(2):  # the second take runs the plan the connection cached on the first
            await add_delivery(conn, ap, trigger)
            async with logged_plans(conn, "auto_explain.log_nested_statements = on",
                                    "auto_explain.log_analyze = on") as plans:
                walked = await take.take_batch(conn, limit=32, lease_s=120, cursor=w.workspace_id, fanout=16,
                                               options=options, capacity=64,
                                               trigger_cursors={w.workspace_id: trigger["id"]})
            assert walked.dispatched == 1
    finally:
        await conn.close()
    [walk] = [plan for plan in plans if "WITH RECURSIVE spaces" in plan]
    lines = walk.splitlines()

    def ran(condition: str) -> int:
        """How many probes with this index condition ran (a cursor may show as a parameter, $n, in the plan)."""
        return sum(1 for i, line in enumerate(lines)
                   if re.search(condition, line) and "never executed" not in lines[i - 1])

    # The first workspace, once; a trigger after the cursor (there is none), once; no second read from the
    # workspace's start for its first trigger.
    assert ran(r"Index Cond: \(\(workspace_id <= ") == 1, walk
    assert ran(r"\(trigger_id > (COALESCE\()?(\w+\.trigger_cursor|\$\d+)") == 1, walk
    assert ran(r"\(trigger_id <= (\w+\.trigger_cursor|\$\d+)\)") == 0, walk


async def test_push_outcomes_reach_their_tasks_by_key_while_the_running_indexes_hold_ended_tasks(wctx, agent_server):
    # The partial indexes of running tasks keep the entries of every task that ran until a vacuum removes them,
    # while the statistics count few running tasks: a completion's cached plan must reach each reported task by
    # its key, never read those entries (seen: a hash join over ~4,000 of them for one report).
    _, _, ap, trigger = await _setup(wctx, agent_server, max_concurrency=4096)
    options = options_for(wctx, "t1", Pusher(wctx, holder="t1"))
    conn = await database.connect(wctx.dsn)

    async def take_and_complete(n: int) -> int:
        taken = await take.take_batch(conn, limit=n, lease_s=120, cursor=None, fanout=16, options=options,
                                      capacity=4096)
        done = await conn.fetch(Q.task_succeed_many, [c.id for c in taken.claimed],
                                [c.lease_token for c in taken.claimed], ['{"ok": true}'] * len(taken.claimed), "t1")
        return len(done)

    try:
        await conn.execute("ALTER TABLE agent_task SET (autovacuum_enabled = false)")
        await bulk_deliveries(conn, ap, trigger, 2000)
        assert sum([await take_and_complete(64) for _ in range(32)]) == 2000  # 2,000 tasks ran and ended
        await conn.execute("ANALYZE agent_task")
        for _ in range(8):  # one report at a time, as at a steady rate: the connection settles on a cached plan
            await add_delivery(conn, ap, trigger)
            assert await take_and_complete(1) == 1
        await add_delivery(conn, ap, trigger)
        async with logged_plans(conn, "auto_explain.log_analyze = on") as plans:
            assert await take_and_complete(1) == 1
    finally:
        await conn.close()
    [plan] = [p for p in plans if "SET status = 'succeeded'" in p]
    assert "Index Scan using agent_task_pkey on agent_task" in plan, plan
    assert "agent_task_running" not in plan and "Seq Scan on agent_task" not in plan, plan


async def test_a_slot_search_reads_each_slots_running_task_by_key_under_analyzed_plans(wctx, agent_server):
    # A slot is free when no running task holds its lease token. Written as NOT EXISTS, that test became an
    # anti-join whose generic plan, made from statistics with many running tasks, read every running task for
    # every slot it looked at: 64 x 64 index entries for a full agent instead of 64.
    _, agent, ap, trigger = await _setup(wctx, agent_server, max_concurrency=64)
    options = options_for(wctx, "t1", Pusher(wctx, holder="t1"))
    async with wctx.pool.acquire() as conn:
        await bulk_deliveries(conn, ap, trigger, 64 * 17)
        for _ in range(16):  # a history of finished tasks beside the running ones, as a live agent has
            done = await take.take_batch(conn, limit=64, lease_s=120, cursor=None, fanout=16, options=options,
                                       capacity=64)
            await conn.execute("UPDATE agent_task SET status = 'succeeded' WHERE id = ANY ($1::uuid[])",
                               [c.id for c in done.claimed])
        full = await take.take_batch(conn, limit=64, lease_s=120, cursor=None, fanout=16, options=options,
                                   capacity=64)
        assert len(full.claimed) == 64  # every slot is held by a running task now
        await conn.execute("ANALYZE agent_task; ANALYZE agent_slot")
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")  # as the take runs it
            read = ("SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid))::integer FROM pg_index "
                    "WHERE indrelid = 'agent_task'::regclass")
            before = await conn.fetchval(read)
            free = await conn.fetchval("SELECT hookgate_slots_take($1, 1, 64)", agent.row["id"])
            after = await conn.fetchval(read)
    assert free == []
    assert after - before <= 64, f"{after - before} index entries of agent_task read to find no free slot of 64"


async def _flooded_workspace(wctx, agent_server, name: str, triggers: int, each: int):
    """A workspace whose autopilot has ``triggers`` webhook triggers with ``each`` queued deliveries apiece."""
    w = await factories.world(wctx, name)
    agent = await factories.http_agent(w, url=agent_server.url(name), name=name)
    ap = await factories.autopilot(w, agent.row["id"], title=name)
    made = [(await factories.webhook_trigger(w, ap, **UNPACED))[0] for _ in range(triggers)]
    async with wctx.pool.acquire() as conn:
        for trigger in made:
            await bulk_deliveries(conn, ap, trigger, each)
    return w, ap, made


async def _dispatched_by(wctx, key: str) -> dict:
    async with wctx.pool.acquire() as conn:
        rows = await conn.fetch(f"SELECT {key} AS k, count(*) AS n FROM webhook_delivery "
                                "WHERE status = 'dispatched' GROUP BY 1")
    return {r["k"]: r["n"] for r in rows}


async def test_a_workspace_with_one_delivery_is_not_starved_by_one_with_fifty_busy_triggers(wctx, agent_server):
    busy, _, _ = await _flooded_workspace(wctx, agent_server, "busy", 50, 20)
    # Made after the busy one: its workspace and trigger ids sort after all of the busy workspace's.
    quiet, quiet_ap, [quiet_trigger] = await _flooded_workspace(wctx, agent_server, "quiet", 1, 0)
    async with wctx.pool.acquire() as conn:
        quiet_delivery, _ = await add_delivery(conn, quiet_ap, quiet_trigger)
    worker = DeliveryWorker(wctx, holder="t", pusher=Pusher(wctx, holder="t"))
    taken = await worker.take_batch(limit=8)
    await worker.pusher.stop(deadline=5)
    async with wctx.pool.acquire() as conn:
        status = await conn.fetchval("SELECT status FROM webhook_delivery WHERE id = $1", quiet_delivery)
    assert status == "dispatched" and taken.dispatched == 8
    assert await _dispatched_by(wctx, "workspace_id") == {busy.workspace_id: 7, quiet.workspace_id: 1}


async def test_busy_workspaces_share_each_batch_equally_whatever_their_number_of_triggers(wctx, agent_server):
    many, _, _ = await _flooded_workspace(wctx, agent_server, "many", 30, 10)
    one, _, _ = await _flooded_workspace(wctx, agent_server, "one", 1, 100)
    worker = DeliveryWorker(wctx, holder="t")
    for _ in range(3):
        assert (await worker.take_batch(limit=16)).dispatched == 16
    assert await _dispatched_by(wctx, "workspace_id") == {many.workspace_id: 24, one.workspace_id: 24}


async def test_within_a_workspace_every_busy_trigger_gets_its_turn_across_batches(wctx, agent_server):
    # 40 busy triggers, 16 visited per take: the worker's cursor in that workspace moves on (and wraps round),
    # so three takes reach every trigger, none twice before all had one.
    _, _, triggers = await _flooded_workspace(wctx, agent_server, "busy", 40, 5)
    worker = DeliveryWorker(wctx, holder="t")
    for _ in range(3):
        assert (await worker.take_batch(limit=16)).dispatched == 16
    per_trigger = await _dispatched_by(wctx, "trigger_id")
    assert set(per_trigger) == {t["id"] for t in triggers}
    assert sorted(per_trigger.values()) == [1] * 32 + [2] * 8


async def test_a_take_of_named_deliveries_reads_only_those_still_queued_and_keeps_the_one_by_one_path(
        wctx, agent_server):
    _, _, ap, trigger = await _setup(wctx, agent_server)
    async with wctx.pool.acquire() as conn:
        await bulk_deliveries(conn, ap, trigger, 3)  # queued before, not named: left for a walk
        named, named_run = await add_delivery(conn, ap, trigger)
        crash, _ = await add_delivery(conn, ap, trigger, admit=False)
        done, _ = await add_delivery(conn, ap, trigger)
        await conn.execute("UPDATE webhook_delivery SET status = 'dispatched' WHERE id = $1", done)
        worker = DeliveryWorker(wctx, holder="t")
        taken = await worker.take_batch(limit=16, ids=[named, crash, done, uuid.uuid4()])
        statuses = dict(await conn.fetch("SELECT status, count(*) FROM webhook_delivery GROUP BY status"))
        run = await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", named_run)
    assert taken.dispatched == 1 and [d.id for d in taken.leased] == [crash]
    assert run == "queued"  # no pusher here: its task waits queued, as from a walk
    assert statuses == {"queued": 4, "dispatched": 2}  # the three not named, and the leased one
    walked = await worker.take_batch(limit=16)
    assert walked.dispatched == 3


async def test_announced_deliveries_are_taken_by_name_and_the_queue_still_walked_while_they_keep_coming(
        db_url, agent_server):
    # A steady stream of announced deliveries must not keep the worker from walking the queue: a delivery
    # nobody announced (its notice lost, a retry come due) is taken within about worker_poll_s (0.5 s here).
    async with open_context(make_settings(db_url, **(FAST | {"worker_poll_s": 0.5})), migrate=False) as ctx:
        _, _, ap, trigger = await _setup(ctx, agent_server)
        wake = NotifyListener(ctx.dsn)
        pusher = Pusher(ctx, holder="t", wake=wake)
        worker = DeliveryWorker(ctx, holder="t", pusher=pusher, wake=wake)
        by_name: list[int] = []
        real_take = worker.take_batch

        async def counting(limit=None, now=None, ids=None):
            taken = await real_take(limit, now, ids)
            if ids is not None:
                by_name.append(taken.dispatched)
            return taken

        worker.take_batch = counting
        await wake.ensure()
        runner = asyncio.create_task(worker.run())
        try:
            async with ctx.pool.acquire() as conn:
                silent, started = None, 0.0
                for _ in range(120):  # up to 3 s of announcements, 25 ms apart
                    announced, _ = await add_delivery(conn, ap, trigger)
                    await conn.execute(Q.notify_send, notify.DELIVERIES, notify.name_deliveries([announced]))
                    await asyncio.sleep(0.025)
                    if silent is None and sum(by_name):  # the stream is taken by name: now one nobody announces
                        silent, started = (await add_delivery(conn, ap, trigger))[0], time.monotonic()
                    elif silent is not None and await conn.fetchval(
                            "SELECT status FROM webhook_delivery WHERE id = $1", silent) == "dispatched":
                        break
                waited = time.monotonic() - started
                seen = await conn.fetchval("SELECT status FROM webhook_delivery WHERE id = $1", silent)
        finally:
            await worker.stop()
            await asyncio.wait_for(runner, 5)
            await pusher.stop(deadline=5)
            await wake.close()
    assert seen == "dispatched" and waited < 1.5


async def test_racing_named_takes_grant_exactly_the_budget_and_defer_the_rest_to_the_window_end(wctx, agent_server):
    _, _, ap, trigger = await _setup(wctx, agent_server)
    async with wctx.pool.acquire() as conn:
        await conn.execute("UPDATE autopilot_trigger SET rate_limit_per_minute = 3 WHERE id = $1", trigger["id"])
        ids = [(await add_delivery(conn, ap, trigger))[0] for _ in range(8)]
    worker = DeliveryWorker(wctx, holder="t")
    takes = await asyncio.gather(*(worker.take_batch(limit=16, ids=ids[i::2]) for i in range(2)))
    async with wctx.pool.acquire() as conn:
        rows = await conn.fetch("SELECT status, reason_code, lease_token, dispatch_attempts, available_at"
                                " FROM webhook_delivery WHERE id = ANY ($1)", ids)
        pace = await conn.fetchrow("SELECT used, window_start + interval '1 minute' AS window_end FROM trigger_pace"
                                   " WHERE trigger_id = $1", trigger["id"])
    assert sum(t.dispatched for t in takes) == 3 and not any(t.leased for t in takes)
    assert sorted(r["status"] for r in rows) == ["dispatched"] * 3 + ["queued"] * 5 and pace["used"] == 3
    deferred = [r for r in rows if r["status"] == "queued"]
    assert all(r["reason_code"] == "paced" and r["lease_token"] is None and r["dispatch_attempts"] == 0
               and r["available_at"] == pace["window_end"] for r in deferred)
