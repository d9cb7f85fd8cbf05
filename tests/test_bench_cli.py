"""Smoke run of the real `atgrpo-bench` entry point with the quickest settings."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from atgrpo.bench import env as env_bench


@pytest.mark.parametrize("suite", ["env", "kernels"])
def test_bench_cli_writes_a_table_and_json(suite: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "atgrpo.bench.cli", suite, "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "ratio" in result.stdout
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["suite"] == suite and r["reference_value"] > 0 and r["value"] > 0 for r in rows)


def test_env_step_bench_measures_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    # The full env suite takes minutes; check one task's step rows end to end.
    monkeypatch.setattr(env_bench, "STEP_TASKS", {"planpath": {}})
    rows = env_bench._step_rows(quick=True)
    assert [r.name for r in rows] == [f"planpath step, batch {b}" for b in (1, 64, 256, 1024)]
    assert all(r.value > 0 and r.reference_value > 0 for r in rows)
