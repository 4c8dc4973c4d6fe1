"""``bench/run_all`` turns each bench's report into one table (parsing only; the benches run in CI's bench step)."""

import json
import subprocess
import sys

from tests.processes import ROOT


def table(name: str, output: str, tmp_path) -> list[list[str]]:
    saved = tmp_path / "out.txt"
    saved.write_text(output)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all"), "--parse", f"{name}={saved}",
                           "--markdown"], capture_output=True, text=True, timeout=30, check=True)
    return [[c.strip() for c in line.strip("|").split("|")] for line in done.stdout.splitlines()[2:]]


def test_report_lines_of_a_bench_become_rows_with_the_ratio(tmp_path):
    output = ("baseline      5123 req/s accepted   p50   3.10 ms   p99  12.00 ms   statuses {200: 5}\n"
              "gateway       2100 req/s accepted   p50   8.20 ms   p99  30.00 ms   statuses {200: 5}\n"
              "ratio        0.41 (gateway / baseline), 64 connections\ndb check: 5/5 OK\n")
    rows = table("ingress", output, tmp_path)
    assert rows[0][:6] == ["ingress", "baseline", "5123", "req/s", "3.10", "12.00"]
    assert rows[1][:8] == ["ingress", "gateway", "2100", "req/s", "8.20", "30.00", "", "0.41"]
    assert len(rows) == 2


def test_bench_json_lines_take_precedence(tmp_path):
    line = {"subject": "claims", "value": 812.5, "unit": "runs/s", "p50_ms": 4.0, "p99_ms": 9.5,
            "baseline": "1016 jobs/s (bare loop)", "ratio": 0.8}
    rows = table("dispatch", f"noise 12 things\nBENCH {json.dumps(line)}\n", tmp_path)
    assert rows == [["dispatch", "claims", "812", "runs/s", "4.00", "9.50", "1016 jobs/s (bare loop)", "0.80", "",
                     ""]]


def test_total_lines_summarise_rounds_and_the_summary_ratio_wins(tmp_path):
    output = ("baseline 3421 req/s accepted p50 15.94 ms p99 58.11 ms\n"
              "gateway 510 req/s accepted p50 107 ms p99 341 ms\n"
              "ratio 0.15 (gateway / baseline), round 1\n"
              "total    baseline     2879 req/s  p50 18.97 ms  p99 68.27 ms\n"
              "total    gateway       474 req/s  p50 123.09 ms  p99 346.39 ms\n"
              "summary  ratio 0.16 (median of rounds 0.19)\n")
    rows = table("ingress", output, tmp_path)
    assert [r[:8] for r in rows] == [["ingress", "baseline", "2879", "req/s", "18.97", "68.27", "", ""],
                                     ["ingress", "gateway", "474", "req/s", "123.09", "346.39", "", "0.16"]]


def test_lag_lines_in_seconds_and_the_duplicate_count_become_rows(tmp_path):
    output = ("setup 0.2 s; first occurrence 11:05:00 UTC\nduplicates=0 missed=0\n"
              "fire lag created_at-planned_at (s): p50=0.077 p99=0.181 max=0.181\n")
    rows = table("scheduler", output, tmp_path)
    assert rows == [["scheduler", "duplicates / missed", "0 / 0", "count", "", "", "", "", "", ""],
                    ["scheduler", "fire lag created_at-planned_at", "0.181", "s max", "77.0", "181.0", "", "", "", ""]]


def test_the_peers_figures_join_the_rows_of_the_same_subject(tmp_path):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("run_all", str(ROOT / "bench" / "run_all"))
    spec = importlib.util.spec_from_loader("run_all", loader)
    assert spec is not None
    run_all = importlib.util.module_from_spec(spec)
    sys.modules["run_all"] = run_all  # its dataclasses look their module up
    try:
        loader.exec_module(run_all)
    finally:
        del sys.modules["run_all"]
    found = run_all.peers('noise\nPEER {"subject": "drain, default settings", "peer": "P: 900 jobs/s"}\n')
    assert found == {"drain, default settings": "P: 900 jobs/s"}
