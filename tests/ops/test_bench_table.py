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
    assert rows[1][:7] == ["ingress", "gateway", "2100", "req/s", "8.20", "30.00", "0.41"]
    assert len(rows) == 2


def test_bench_json_lines_take_precedence(tmp_path):
    line = {"subject": "claims", "value": 812.5, "unit": "runs/s", "p50_ms": 4.0, "p99_ms": 9.5, "ratio": 0.8}
    rows = table("dispatch", f"noise 12 things\nBENCH {json.dumps(line)}\n", tmp_path)
    assert rows == [["dispatch", "claims", "812", "runs/s", "4.00", "9.50", "0.80", ""]]
