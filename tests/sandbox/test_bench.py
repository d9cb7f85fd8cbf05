"""Smoke run of `atgrpo-bench sandbox --quick` through the real CLI entry point."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_sandbox_writes_latency_and_throughput_rows(tmp_path: Path) -> None:
    out = tmp_path / "sandbox.json"
    result = subprocess.run(
        [sys.executable, "-m", "atgrpo.bench.cli", "sandbox", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
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
        "printing program latency, 1 worker",
    }
    for name, row in rows.items():
        value, ref = row["value"], row["reference_value"]
        assert row["suite"] == "sandbox", name
        assert math.isfinite(value) and value > 0 and math.isfinite(ref) and ref > 0, (name, row)
        # The ratio is computed from the two measurements, oriented by higher_is_better.
        want = value / ref if row["higher_is_better"] else ref / value
        assert math.isclose(row["ratio"], want, rel_tol=1e-9), (name, row)
    # Latencies are in ms, lower is better; rates in exec/s, higher is better.
    for name, row in rows.items():
        assert (row["unit"], row["higher_is_better"]) == (("ms", False) if "latency" in name else ("exec/s", True)), (
            name
        )
    # The overheads are the measured difference, not a label: value - reference, in ms.
    for name in (
        "execution latency, 1 worker",
        "execution latency, parent holding 2 GB",
        "function program latency, 1 worker",
    ):
        row = rows[name]
        assert math.isclose(
            row["extra"]["overhead_ms"], row["value"] - row["reference_value"], rel_tol=1e-9, abs_tol=1e-9
        )
    # A fork of this process was timed too, beside the sandbox's spawn.
    assert rows["execution latency, 1 worker"]["extra"]["fork_exec_pass_ms"] > 0
    # Targets: met or not is what the numbers say (never a wall-clock pass/fail in the test).
    latency = rows["execution latency, 1 worker"]
    assert latency["target_met"] == (latency["extra"]["overhead_ms"] <= 2.0)
    # Printing programs: the zygote path against the old one, the saving the measured difference.
    printing = rows["printing program latency, 1 worker"]
    assert "stdio_zygote=False" in printing["reference_name"], printing
    assert math.isclose(
        printing["extra"]["saved_ms"], printing["reference_value"] - printing["value"], rel_tol=1e-9, abs_tol=1e-9
    )
    rate = rows["function programs/s, concurrency 2"]
    assert rate["target_met"] == (rate["value"] >= 0.9 * rate["reference_value"])
