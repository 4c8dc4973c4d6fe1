"""A trigger's own success reply: accepted and duplicate deliveries answered with it, everything else as before."""

from __future__ import annotations

import pytest

from tests.gateway import ingress_kit as kit

TWIML = {"status": 200, "content_type": "text/xml", "body": "<Response/>"}


async def test_accepted_and_duplicate_deliveries_get_the_triggers_reply(ctx, client, conn):
    h = await kit.hook(ctx, reply=TWIML)
    raw, headers = kit.github({"action": "opened"}, delivery="d-1")
    first = await client.post(h.path, content=raw, headers=headers)
    again = await client.post(h.path, content=raw, headers=headers)
    [d] = await kit.deliveries(conn)
    for answer in (first, again):
        assert (answer.status_code, answer.text) == (200, "<Response/>")
        assert answer.headers["content-type"] == "text/xml"
        assert answer.headers["hookgate-delivery-id"] == str(d["id"])  # the receipt's id, still traceable
    assert d["status"] == "queued" and d["attempt_count"] == 2


@pytest.mark.parametrize("reply", [{"status": 204, "content_type": "text/plain", "body": ""},
                                   {"status": 202, "content_type": "application/json", "body": '{"ok":true}'},
                                   {"status": 201, "content_type": "text/plain; charset=utf-8", "body": "Thanks! ✓"}])
async def test_reply_status_content_type_and_body_are_sent_as_set(ctx, client, conn, reply):
    h = await kit.hook(ctx, reply=reply)
    r = await kit.post_github(client, h, {"action": "opened"})
    assert (r.status_code, r.content, r.headers["content-type"]) == (
        reply["status"], reply["body"].encode(), reply["content_type"])


async def test_refused_ignored_and_skipped_deliveries_keep_their_json_answers(ctx, client, conn):
    h = await kit.hook(ctx, reply=TWIML, event_filters=["github.issues.opened"])
    rejected = await client.post(h.path, json={"action": "opened"}, headers={"x-github-event": "issues"})
    ignored = await kit.post_github(client, h, {"action": "closed"})
    assert (rejected.status_code, rejected.json()["status"]) == (401, "rejected")
    assert (ignored.status_code, ignored.json()["status"]) == (200, "ignored")


async def test_without_a_reply_the_answer_is_the_json_receipt(ctx, client, conn):
    h = await kit.hook(ctx)
    r = await kit.post_github(client, h, {"action": "opened"})
    assert r.headers["content-type"] == "application/json" and r.json()["status"] == "accepted"
    assert "hookgate-delivery-id" not in r.headers
