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
    }
    for row in rows.values():
        assert row["suite"] == "sandbox" and row["value"] > 0 and row["reference_value"] > 0
    assert "overhead_ms" in rows["execution latency, 1 worker"]["extra"]
