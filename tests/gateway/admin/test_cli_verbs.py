"""The admin CLI verbs against the live app: tables by default, the API's JSON with --json, exit codes."""

from __future__ import annotations

import json

import pytest

from hookgate.cli import build_parser
from tests import factories, pushes
from tests.gateway.admin.conftest import hookgate


async def test_daily_verbs_create_list_rotate_and_replay(world, live_url, capsys, monkeypatch):
    monkeypatch.setenv("HOOKGATE_URL", live_url)
    monkeypatch.setenv("HOOKGATE_API_KEY", world.api_key)
    code, out, _ = await hookgate(capsys, "agents", "create", "--name", "bot", "--endpoint", "http://127.0.0.1:9/x",
                                  "--json")
    agent = json.loads(out)
    assert code == 0 and agent["signing_secret"].startswith("whsec_")
    code, out, _ = await hookgate(capsys, "autopilots", "create", "--title", "triage", "--agent", agent["id"],
                                  "--mode", "run_only", "--json")
    autopilot = json.loads(out)
    _, out, _ = await hookgate(capsys, "triggers", "create", "--autopilot", autopilot["id"], "--provider", "github",
                               "--json")
    trigger = json.loads(out)
    assert trigger["token"].startswith("awt_")
    _, out, _ = await hookgate(capsys, "triggers", "rotate-token", trigger["id"], "--json")
    assert json.loads(out)["token"] != trigger["token"]
    code, out, _ = await hookgate(capsys, "triggers", "set-secret", trigger["id"], "--secret", "gh-secret-9876")
    assert code == 0 and out.split() == ["hint", "9876"]
    _, out, _ = await hookgate(capsys, "triggers", "create", "--autopilot", autopilot["id"], "--cron", "0 9 * * *",
                               "--timezone", "Europe/Paris")
    assert "next_fire_at" in out and "Europe/Paris" in out
    _, out, _ = await hookgate(capsys, "runs", "start", autopilot["id"], "--payload", '{"n": 1}', "--json")
    run = json.loads(out)
    code, out, _ = await hookgate(capsys, "runs", "list")
    header, *rows = out.splitlines()
    assert code == 0 and header.split()[:3] == ["ID", "SOURCE", "STATUS"] and rows[0].startswith(run["run_id"])
    _, out, _ = await hookgate(capsys, "runs", "get", run["run_id"], "--json")
    assert json.loads(out)["originator_id"] == str(world.owner_id)
    code, out, _ = await hookgate(capsys, "deliveries", "list", "--json")
    assert code == 0 and json.loads(out) == {"items": [], "next_cursor": None}
    code, out, _ = await hookgate(capsys, "agents", "list")
    assert "bot" in out and "http://127.0.0.1:9/x" in out


async def test_errors_exit_nonzero_with_one_line(world, live_url, capsys, monkeypatch):
    monkeypatch.setenv("HOOKGATE_API_KEY", world.api_key)
    code, _, err = await hookgate(capsys, "runs", "get", "00000000-0000-0000-0000-000000000000", "--url", live_url)
    assert code == 1 and err.strip() == "hookgate: error: 404 not_found: no such run"
    code, _, err = await hookgate(capsys, "deliveries", "replay", "00000000-0000-0000-0000-000000000000", "--url",
                                  live_url, "--key", "hgk_bad")
    assert code == 1 and "401 unauthorized" in err
    monkeypatch.delenv("HOOKGATE_API_KEY")
    code, _, err = await hookgate(capsys, "runs", "list", "--url", live_url)
    assert code == 2 and err == "hookgate: error: no API key: pass --key or set HOOKGATE_API_KEY\n"


async def test_replay_bulk_dry_runs_then_replays_what_the_filters_select(ctx, live_url, conn, capsys, monkeypatch):
    s = await factories.small(ctx)
    w, trigger = s.world, s.trigger
    hour_ago = await conn.fetchval("SELECT now() - interval '1 hour'")
    failed = [str(await factories.delivery(conn, trigger, event="push", envelope={}, signature_status="valid",
                                           status=status, received_at=hour_ago))
              for status in ("failed", "failed", "dispatched")][:2]
    failed.sort()  # one received_at, so in id order; two ids made in one millisecond need not follow their inserts
    monkeypatch.setenv("HOOKGATE_URL", live_url)
    monkeypatch.setenv("HOOKGATE_API_KEY", w.api_key)
    select = ("--trigger", str(trigger["id"]), "--status", "failed", "--since", "2h", "--until", "30m")
    code, out, _ = await hookgate(capsys, "deliveries", "replay-bulk", *select, "--dry-run", "--json")
    assert code == 0 and json.loads(out) == {"matched": 2, "replayed": 0, "delivery_ids": failed}
    code, out, _ = await hookgate(capsys, "deliveries", "replay-bulk", *select, "--run-status", "failed", "--json")
    assert code == 0 and json.loads(out)["matched"] == 0  # these deliveries have no run
    code, out, _ = await hookgate(capsys, "deliveries", "replay-bulk", *select, "--since", "45m")
    assert code == 0 and out.splitlines()[:2] == ["matched       0", "replayed      0"]
    code, out, _ = await hookgate(capsys, "deliveries", "replay-bulk", *select, "--idempotency-key", "k1")
    assert code == 0 and out.splitlines()[:2] == ["matched       2", "replayed      2"]
    copies = await conn.fetch("SELECT replayed_from_delivery_id::text FROM webhook_delivery "
                              "WHERE replayed_from_delivery_id IS NOT NULL")
    assert sorted(r[0] for r in copies) == sorted(failed)
    code, _, err = await hookgate(capsys, "deliveries", "replay-bulk", "--limit", "5")
    assert code == 1 and err.startswith("hookgate: error: 422 filter_required: ")
    for bad in (("--since", "2026-03-01T12:00:00"), ("--status", "rejected"), ("--trigger", "nope"),
                ("--run-status", "done")):
        with pytest.raises(SystemExit) as refused:
            build_parser().parse_args(["deliveries", "replay-bulk", *bad])
        assert refused.value.code == 2 and bad[1] in capsys.readouterr().err


async def test_a_failed_run_reads_its_attempts_and_is_retried(ctx, live_url, conn, capsys, monkeypatch,
                                                               world):
    agent = await factories.http_agent(world)
    ap = await factories.autopilot(world, agent.row["id"])
    async with pushes.failing_agent() as url:
        run_id = str(await pushes.failed_run(ctx, ap["id"], agent.row["id"], url))
    monkeypatch.setenv("HOOKGATE_URL", live_url)
    monkeypatch.setenv("HOOKGATE_API_KEY", world.api_key)
    code, out, _ = await hookgate(capsys, "runs", "get", run_id)
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert code == 0 and lines["status"] == "failed" and lines["attempt"] == "2"
    assert lines["next_attempt_at"] == "-" and "502" in lines["last_error"]
    assert lines["latest_attempt"].startswith("#2 failed, HTTP 502, ")
    task_id = await conn.fetchval("SELECT id::text FROM agent_task WHERE run_id = $1", run_id)

    code, out, _ = await hookgate(capsys, "tasks", "attempts", task_id)
    header, *rows = out.splitlines()
    assert code == 0 and header.split() == ["ATTEMPT", "OUTCOME", "HTTP_STATUS", "DURATION_MS", "STARTED_AT", "ERROR"]
    assert [r.split()[:3] for r in rows] == [["1", "failed", "502"], ["2", "failed", "502"]]
    code, out, _ = await hookgate(capsys, "tasks", "attempts", task_id, "--limit", "1", "--json")
    first = json.loads(out)
    assert code == 0 and [a["attempt"] for a in first["items"]] == [1] and first["next_cursor"]
    assert "upstream down" in first["items"][0]["response_body"]  # the owner writes the autopilot
    code, out, _ = await hookgate(capsys, "tasks", "attempts", task_id, "--cursor", first["next_cursor"], "--json")
    assert [a["attempt"] for a in json.loads(out)["items"]] == [2]

    code, out, _ = await hookgate(capsys, "runs", "retry", run_id, "--idempotency-key", "r-1", "--json")
    retried = json.loads(out)
    assert code == 0 and retried["run_id"] == run_id and retried["attempt"] == 2
    code, out, _ = await hookgate(capsys, "runs", "retry", run_id, "--idempotency-key", "r-1", "--json")
    assert code == 0 and json.loads(out) == retried  # the same key: the first answer, no second task
    assert await conn.fetchval("SELECT count(*) FROM agent_task WHERE run_id = $1", run_id) == 2
    assert await conn.fetchval("SELECT status FROM autopilot_run WHERE id = $1", run_id) == "queued"
    code, _, err = await hookgate(capsys, "runs", "retry", run_id)
    assert code == 1 and err.startswith("hookgate: error: 409 run_not_retryable: ")


async def test_agents_show_health_and_take_a_retry_schedule(world, live_url, conn, capsys, monkeypatch):
    agent = await factories.http_agent(world)
    agent_id = str(agent.row["id"])
    monkeypatch.setenv("HOOKGATE_URL", live_url)
    monkeypatch.setenv("HOOKGATE_API_KEY", world.api_key)
    code, out, _ = await hookgate(capsys, "agents", "update", agent_id, "--retry-schedule", "5s,1m,1h", "--json")
    assert code == 0 and json.loads(out)["retry_schedule"] == [5.0, 60.0, 3600.0]
    code, out, _ = await hookgate(capsys, "agents", "get", agent_id)
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["retry_schedule"] == "5s,1m,1h (4 attempts)" and lines["health"] == "healthy"
    await conn.execute(
        "INSERT INTO agent_health (agent_id, state, since, failures, last_error, next_probe_at, probe_interval_s,"
        " probe_max_s) VALUES ($1, 'unhealthy', '2026-01-02T03:04:05Z', 5, 'agent answered 502',"
        " '2026-01-02T03:05:05Z', 60, 3600)", agent.row["id"])
    code, out, _ = await hookgate(capsys, "agents", "get", agent_id)
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert (lines["health"], lines["failures"], lines["last_error"]) == ("unhealthy", "5", "agent answered 502")
    assert lines["health_since"].startswith("2026-01-02T03:04:05") and lines["next_probe_at"].startswith(
        "2026-01-02T03:05:05")
    code, out, _ = await hookgate(capsys, "agents", "list")
    header, row = out.splitlines()[0], next(r for r in out.splitlines() if agent_id in r)
    assert "HEALTH STATE" in header and row[header.index("HEALTH STATE"):].split()[0] == "unhealthy"
    code, out, _ = await hookgate(capsys, "agents", "update", agent_id, "--retry-schedule", "default")
    assert code == 0 and "default (the gateway's HOOKGATE_PUSH_RETRY_SCHEDULE)" in out
    assert await conn.fetchval("SELECT retry_schedule FROM agent WHERE id = $1", agent.row["id"]) is None
    code, out, _ = await hookgate(capsys, "agents", "create", "--name", "b2", "--endpoint", "http://127.0.0.1:9/b",
                                  "--retry-schedule", "30s,2m", "--json")
    assert code == 0 and json.loads(out)["retry_schedule"] == [30.0, 120.0]
    for bad in ("5x", "0s", ",".join(["1s"] * 21)):
        with pytest.raises(SystemExit) as refused:
            build_parser().parse_args(["agents", "update", agent_id, "--retry-schedule", bad])
        assert refused.value.code == 2 and "retry" in capsys.readouterr().err


async def test_notification_channels_create_list_test_and_delete(world, live_url, conn, capsys, monkeypatch):
    monkeypatch.setenv("HOOKGATE_URL", live_url)
    monkeypatch.setenv("HOOKGATE_API_KEY", world.api_key)
    code, out, _ = await hookgate(capsys, "channels", "create", "--name", "ops", "--endpoint",
                                  "http://127.0.0.1:9/alerts", "--event", "run.failed", "--event", "agent.unhealthy")
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert code == 0 and lines["signing_secret"].startswith("whsec_")
    channel_id = lines["id"]
    code, out, _ = await hookgate(capsys, "channels", "list")
    header, *rows = out.splitlines()
    assert code == 0 and header.split()[:3] == ["ID", "NAME", "URL"] and rows[0].startswith(channel_id)
    assert "whsec_" not in out and lines["signing_secret"][-4:] in rows[0]
    code, out, _ = await hookgate(capsys, "channels", "get", channel_id, "--json")
    assert code == 0 and json.loads(out)["events"] == ["run.failed", "agent.unhealthy"]
    code, out, _ = await hookgate(capsys, "channels", "test", channel_id, "--json")
    ping = json.loads(out)["notification_id"]
    assert await conn.fetchval("SELECT event FROM notification WHERE id = $1", ping) == "ping"
    code, out, _ = await hookgate(capsys, "channels", "delete", channel_id, "--json")
    assert code == 0 and json.loads(out)["id"] == channel_id
    code, _, err = await hookgate(capsys, "channels", "get", channel_id)
    assert code == 1 and "404 not_found" in err
    code, _, err = await hookgate(capsys, "channels", "create", "--name", "x", "--endpoint", "http://169.254.169.254/",
                                  "--event", "run.failed")
    assert code == 1 and "422 channel_url_forbidden" in err
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["channels", "create", "--name", "x", "--endpoint", "http://a", "--event", "nope"])
    assert refused.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err
