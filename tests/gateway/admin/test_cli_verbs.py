"""The admin CLI verbs against the live app: tables by default, the API's JSON with --json, exit codes."""

from __future__ import annotations

import json

import pytest

from hookgate import admin_client
from hookgate.cli import build_parser
from tests import factories


async def hookgate(capsys, *argv):
    args = build_parser().parse_args(list(argv))
    code = 0
    try:
        await admin_client.run(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_daily_verbs_create_list_rotate_and_replay(ctx, live_url, capsys, monkeypatch):
    w = await factories.world(ctx)
    monkeypatch.setenv("HOOKGATE_URL", live_url)
    monkeypatch.setenv("HOOKGATE_API_KEY", w.api_key)
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
    assert json.loads(out)["originator_id"] == str(w.owner_id)
    code, out, _ = await hookgate(capsys, "deliveries", "list", "--json")
    assert code == 0 and json.loads(out) == {"items": [], "next_cursor": None}
    code, out, _ = await hookgate(capsys, "agents", "list")
    assert "bot" in out and "http://127.0.0.1:9/x" in out


async def test_errors_exit_nonzero_with_one_line(ctx, live_url, capsys, monkeypatch):
    w = await factories.world(ctx)
    monkeypatch.setenv("HOOKGATE_API_KEY", w.api_key)
    code, _, err = await hookgate(capsys, "runs", "get", "00000000-0000-0000-0000-000000000000", "--url", live_url)
    assert code == 1 and err.strip() == "hookgate: error: 404 not_found: no such run"
    code, _, err = await hookgate(capsys, "deliveries", "replay", "00000000-0000-0000-0000-000000000000", "--url",
                                  live_url, "--key", "hgk_bad")
    assert code == 1 and "401 unauthorized" in err
    monkeypatch.delenv("HOOKGATE_API_KEY")
    code, _, err = await hookgate(capsys, "runs", "list", "--url", live_url)
    assert code == 2 and err == "hookgate: error: no API key: pass --key or set HOOKGATE_API_KEY\n"


async def test_replay_bulk_dry_runs_then_replays_what_the_filters_select(ctx, live_url, conn, capsys, monkeypatch):
    w = await factories.world(ctx)
    agent = await factories.http_agent(w)
    ap = await factories.autopilot(w, agent.row["id"])
    trigger, _ = await factories.webhook_trigger(w, ap)
    failed = [await conn.fetchval(
        """INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, provider, event, envelope,
                                         signature_status, status, received_at)
           VALUES ($1, $2, $3, 'generic', 'push', '{}', 'valid', $4, now() - interval '1 hour') RETURNING id::text""",
        w.workspace_id, trigger["id"], ap["id"], status) for status in ("failed", "failed", "dispatched")][:2]
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
