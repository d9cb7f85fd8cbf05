"""Smoke run of `atgrpo-bench sandbox --quick` through the real CLI entry point."""

import json
import subprocess
import sys
from pathlib import Path


def test_bench_sandbox_writes_latency_and_throughput_rows(tmp_path: Path) -> None:
    out = tmp_path / "sandbox.json"
    result = subprocess.run(
        [sys.executable, "-m", "atgrpo.bench.cli", "sandbox", "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "overhead <= 2 ms" in result.stdout
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {
        "execution latency, 1 worker",
        "execution latency, parent holding 2 GB",
        "executions/s, concurrency 1",
        "executions/s, concurrency 2",
        "executions/s, concurrency 4",
        "function program latency, 1 worker",
        "stdio program latency, 1 worker",
        "function programs/s, concurrency 2",
    }
    for row in rows.values():
        assert row["suite"] == "sandbox" and row["value"] > 0 and row["reference_value"] > 0
    assert "overhead_ms" in rows["execution latency, 1 worker"]["extra"]
    # The single-interpreter reference (issue 21) and its targets.
    assert rows["function programs/s, concurrency 2"]["reference_name"].startswith("one plain python -I -S")
    assert ">= 0.9x" in rows["function programs/s, concurrency 2"]["target"]
    assert "within +2 ms" in rows["function program latency, 1 worker"]["target"]
