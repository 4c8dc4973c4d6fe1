"""The admin CLI verbs against the live app: tables by default, the API's JSON with --json, exit codes."""

from __future__ import annotations

import json

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
