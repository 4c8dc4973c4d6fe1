"""Time partitions: made ahead, dropped whole past retention, dedupe across them, the audit log append-only in each.

The job runs at an injected ``now`` (days ahead of the database clock) so that partitions made today are past
retention without waiting; rows are put into a chosen partition by their UUIDv7 id.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from gateway.ingress.batch import uuid7
from scheduler.maintenance import partitions
from scheduler.maintenance.partitions import Retention
from tests import factories
from tests.gateway import ingress_kit as kit

DAY = timedelta(days=1)


async def _now(conn) -> datetime:
    return await conn.fetchval("SELECT now()")


async def _bounds(conn, parent: str) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM hookgate_partition_bounds($1::regclass)", parent)


def _at(day: datetime) -> uuid.UUID:
    """A UUIDv7 of noon UTC of ``day``: it falls in that day's delivery partition."""
    noon = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    return uuid7(noon.timestamp())


async def _delivery(conn, h: kit.Hook, id_: uuid.UUID, status: str = "dispatched", key: str | None = None) -> bool:
    """Insert a delivery with id ``id_`` directly; whether a row was inserted (a held key inserts none)."""
    stored = await factories.delivery(conn, h.trigger, id=id_, provider="github", signature_status="valid",
                                      status=status, dedupe_key=key)
    return stored is not None


async def test_partitions_exist_ahead_and_the_job_makes_the_missing_ones_idempotently(conn):
    now = await _now(conn)
    for parent, ahead in (("webhook_delivery", timedelta(days=7)), ("task_attempt", timedelta(days=14)),
                          ("audit_log", timedelta(days=59))):
        bounds = await _bounds(conn, parent)
        assert bounds[0]["partition_name"] == f"{parent}_legacy" and bounds[0]["lower_at"] is None
        assert bounds[-1]["upper_at"] >= now + ahead, parent
        # contiguous: each partition starts where the previous ends
        assert all(a["upper_at"] == b["lower_at"] for a, b in itertools.pairwise(bounds)), parent
    later = now + 30 * DAY
    created = await partitions.create_ahead(conn, later)
    assert sum(n.startswith("webhook_delivery_p") for n in created) >= 30
    assert await partitions.create_ahead(conn, later) == []
    assert (await _bounds(conn, "webhook_delivery"))[-1]["upper_at"] >= later + 7 * DAY


async def test_past_retention_partitions_are_dropped_whole_but_a_queued_delivery_keeps_its_own(ctx, conn):
    h = await kit.hook(ctx)
    now = await _now(conn)
    await partitions.create_ahead(conn, now + 10 * DAY)
    days = [now + k * DAY for k in (2, 3, 4)]
    kept_queued = _at(days[1])
    ids = [_at(day) for day in days]
    for day, id_ in zip(days, ids, strict=True):
        assert await _delivery(conn, h, id_, "dispatched", key=f"k-{day.date()}")
    assert await _delivery(conn, h, kept_queued, "queued")
    today = await factories.delivery(conn, h.trigger, provider="github", signature_status="valid", status="dispatched")
    later_partition = "webhook_delivery_p" + (now + 6 * DAY).strftime("%Y%m%d")
    relfilenode_before = await conn.fetchval("SELECT pg_relation_filenode($1::regclass)", later_partition)
    outcome = await partitions.maintain(conn, now + 8 * DAY, Retention(deliveries=3 * DAY))
    names = {r["partition_name"] for r in await _bounds(conn, "webhook_delivery")}
    d3 = "webhook_delivery_p" + days[1].strftime("%Y%m%d")
    assert d3 in names, "a partition with a queued delivery is kept"
    assert "webhook_delivery_legacy" not in names and "webhook_delivery_p" + days[0].strftime("%Y%m%d") not in names
    assert set(outcome.dropped) >= {"webhook_delivery_legacy", "webhook_delivery_p" + days[0].strftime("%Y%m%d"),
                                    "webhook_delivery_p" + days[2].strftime("%Y%m%d")}
    assert outcome.deferred == []
    left = {r["id"] for r in await conn.fetch("SELECT id FROM webhook_delivery")}
    assert left == {kept_queued, ids[1]}, "only the queued delivery's partition is left of the dropped range"
    assert today not in left
    # the dropped partitions' dedupe keys went with them: the key is free again
    assert await conn.fetchval("SELECT array_agg(delivery_id) FROM webhook_delivery_dedupe") == [ids[1]]
    assert outcome.keys_released == 2
    # nothing was deleted row by row: the partitions that stay were not touched
    assert await conn.fetchval("SELECT pg_relation_filenode($1::regclass)", later_partition) == relfilenode_before
    # the queued delivery done, its partition goes at the next run
    await conn.execute("UPDATE webhook_delivery SET status = 'dispatched' WHERE id = $1", kept_queued)
    again = await partitions.maintain(conn, now + 8 * DAY, Retention(deliveries=3 * DAY))
    assert again.dropped == [d3]


async def test_attempts_and_audit_go_by_their_own_retention_and_none_means_forever(conn):
    now = await _now(conn)
    await partitions.create_ahead(conn, now + 100 * DAY)
    outcome = await partitions.maintain(conn, now + 100 * DAY, Retention(attempts=30 * DAY))
    assert outcome.dropped and all(n.startswith("task_attempt_") for n in outcome.dropped)
    assert "task_attempt_legacy" in outcome.dropped
    outcome = await partitions.maintain(conn, now + 100 * DAY, Retention(audit=30 * DAY))
    assert "audit_log_legacy" in outcome.dropped and all(n.startswith("audit_log_") for n in outcome.dropped)
    assert (await partitions.maintain(conn, now + 100 * DAY, Retention())).dropped == []


async def test_a_dedupe_key_is_held_across_partition_boundaries_and_released_by_failure(ctx, conn):
    h = await kit.hook(ctx)
    now = await _now(conn)
    first = _at(now + 2 * DAY)
    assert await _delivery(conn, h, first, "dispatched", key="K")
    # another day's partition, the legacy one, a later one: the key is held in all of them
    for other in (uuid7(now.timestamp()), _at(now + 3 * DAY), _at(now + 5 * DAY)):
        assert not await _delivery(conn, h, other, "queued", key="K")
    assert await _delivery(conn, h, _at(now + 3 * DAY), "rejected", key="K"), "a rejected row holds no key"
    await conn.execute("UPDATE webhook_delivery SET status = 'failed' WHERE id = $1", first)
    second = _at(now + 4 * DAY)
    assert await _delivery(conn, h, second, "queued", key="K"), "a failed delivery releases its key"
    with pytest.raises(asyncpg.UniqueViolationError):  # leaving failed, it cannot take the key back
        await conn.execute("UPDATE webhook_delivery SET status = 'queued' WHERE id = $1", first)
    assert await conn.fetchval("SELECT delivery_id FROM webhook_delivery_dedupe WHERE dedupe_key = 'K'") == second


async def test_ingress_finds_the_original_of_a_duplicate_in_an_older_partition(ctx, client, conn):
    h = await kit.hook(ctx)
    now = await _now(conn)
    raw, headers = kit.github({"action": "opened"}, delivery="gh-1")
    # the original, stored two days ago (legacy partition); the retry today lands in today's partition
    original = uuid7((now - 2 * DAY).timestamp())
    await factories.delivery(conn, h.trigger, id=original, provider="github", event="github.issues",
                             signature_status="valid", status="dispatched", dedupe_key="gh-1", body=raw)
    again = await client.post(h.path, content=raw, headers=headers)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert again.json()["delivery_id"] == str(original) and again.json()["body_matches"] is True
    assert await conn.fetchval("SELECT attempt_count FROM webhook_delivery WHERE id = $1", original) == 2
    assert await conn.fetchval("SELECT count(*) FROM webhook_delivery") == 1


@pytest.mark.parametrize("partition", ["audit_log_legacy", "new"])
async def test_every_audit_partition_refuses_update_delete_and_truncate(conn, partition):
    now = await _now(conn)
    if partition == "new":
        await partitions.create_ahead(conn, now + 90 * DAY)
        partition = (await _bounds(conn, "audit_log"))[-1]["partition_name"]
        at = (await _bounds(conn, "audit_log"))[-1]["lower_at"]
    else:
        at = now
    await conn.execute("INSERT INTO audit_log (action, actor_type, subject_type, at) VALUES ('X', 'system', 's', $1)",
                       at)
    assert await conn.fetchval(f"SELECT count(*) FROM {partition}") == 1
    for statement in (f"UPDATE {partition} SET action = 'Y'", f"DELETE FROM {partition}", f"TRUNCATE {partition}",
                      "UPDATE audit_log SET action = 'Y'", "DELETE FROM audit_log", "TRUNCATE audit_log"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            await conn.execute(statement)
    assert await conn.fetchval(f"SELECT count(*) FROM {partition}") == 1


async def test_a_busy_partition_lock_defers_its_drop_and_ingress_never_waits_on_it(ctx, conn, db_url):
    h = await kit.hook(ctx)
    now = await _now(conn)
    await partitions.create_ahead(conn, now + 10 * DAY)
    target = "webhook_delivery_p" + (now + 2 * DAY).strftime("%Y%m%d")
    holder = await asyncpg.connect(db_url)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute(f"LOCK TABLE {target} IN ACCESS SHARE MODE")  # a long reader of that partition
        await holder.execute(f"SELECT count(*) FROM {target}")
        started = asyncio.get_running_loop().time()
        outcome = await partitions.maintain(conn, now + 8 * DAY, Retention(deliveries=3 * DAY))
        assert asyncio.get_running_loop().time() - started < 10
        assert target in outcome.deferred and target not in outcome.dropped
        # meanwhile an insert goes through at once
        assert await _delivery(conn, h, _at(now + 7 * DAY), "queued", key="live")
        await tx.rollback()
    finally:
        await holder.close()
    # the next run finishes it (a detach left half-way is finalized)
    outcome = await partitions.maintain(conn, now + 8 * DAY, Retention(deliveries=3 * DAY))
    assert target in outcome.dropped


async def test_retention_of_many_partitions_while_ingress_runs_loses_and_doubles_no_delivery(ctx, client, conn,
                                                                                            db_url):
    h = await kit.hook(ctx)
    now = await _now(conn)
    await partitions.create_ahead(conn, now + 40 * DAY)
    old = [(_at(now + k * DAY), f"old-{k}-{i}") for k in range(1, 35) for i in range(3)]
    for id_, key in old:
        assert await _delivery(conn, h, id_, "dispatched", key=key)
    keys = [f"live-{i}" for i in range(150)]
    sends = keys + keys[::3] + keys[::7]  # every key once, some of them two or three times
    gate = asyncio.Semaphore(16)
    clock = asyncio.get_running_loop().time
    answered: list[float] = []
    window: list[float] = []

    async def send(key: str) -> dict[str, str]:
        raw, headers = kit.github({"action": "opened", "key": key}, delivery=key)
        async with gate:
            answer = await client.post(h.path, content=raw, headers=headers)
        answered.append(clock())
        assert answer.status_code == 200, answer.text
        return {"key": key} | answer.json()

    async def retention() -> partitions.Outcome:
        other = await asyncpg.connect(db_url)
        try:
            await asyncio.sleep(0.05)  # with ingress under way
            window.append(clock())
            return await partitions.maintain(other, now + 40 * DAY, Retention(deliveries=5 * DAY))
        finally:
            window.append(clock())
            await other.close()

    outcome, *answers = await asyncio.gather(retention(), *(send(k) for k in sends))
    during = sum(window[0] <= t <= window[1] for t in answered)
    assert during >= 10, f"only {during} answers while retention ran"
    assert len([n for n in outcome.dropped if n.startswith("webhook_delivery_p")]) == 34, outcome
    assert outcome.deferred == [] and "webhook_delivery_legacy" not in outcome.dropped  # today's queued deliveries
    assert outcome.keys_released == len(old)
    first = {a["key"]: a["delivery_id"] for a in answers if a["status"] != "duplicate"}
    assert sorted(first) == sorted(keys), "each key accepted exactly once"
    assert all(a["delivery_id"] == first[a["key"]] for a in answers), "every repeat names the one delivery"
    rows = await conn.fetch("SELECT id, dedupe_key, attempt_count FROM webhook_delivery")
    assert sorted(str(r["id"]) for r in rows) == sorted(first.values()), "no delivery lost, none doubled, old gone"
    counts = {r["dedupe_key"]: r["attempt_count"] for r in rows}
    assert counts == {k: sends.count(k) for k in keys}
    assert await conn.fetchval("SELECT count(*) FROM autopilot_run WHERE webhook_delivery_id IS NOT NULL") == len(keys)
    assert await conn.fetchval("SELECT count(*) FROM webhook_delivery_dedupe") == len(keys)
