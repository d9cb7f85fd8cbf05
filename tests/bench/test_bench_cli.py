"""Smoke run of the real `atgrpo-bench` entry point with the quickest settings."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from atgrpo.bench import env as env_bench
from atgrpo.bench import transport as transport_bench


@pytest.mark.integration
@pytest.mark.parametrize("suite", ["env", "kernels"])
def test_bench_cli_writes_a_table_and_json(suite: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "atgrpo.bench.cli", suite, "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
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


@pytest.mark.integration
def test_transport_bench_writes_every_row(tmp_path: Path) -> None:
    # `atgrpo-bench transport --quick --json <path>`, as the generic case above, plus its row names.
    out = tmp_path / "transport.json"
    result = subprocess.run(
        [sys.executable, "-m", "atgrpo.bench.cli", "transport", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "ratio" in result.stdout
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert all(r["suite"] == "transport" for r in rows.values())
    weights = [n for n in rows if n.startswith("weight sync")]
    samples = [n for n in rows if n.startswith("SampleBatch")]
    assert len(weights) == 4 and {n.rsplit(" ", 1)[-1] for n in weights} == {"ipc", "tcp"}
    assert len(samples) == 2 and {n.rsplit(" ", 1)[-1] for n in samples} == {"ipc", "tcp"}
    for name in weights:
        row = rows[name]
        assert row["unit"] == "GB/s" and row["value"] > 0 and row["reference_value"] > 0 and row["ratio"] > 0
        assert {"megabytes", "frames_cached_GBps", "checksum_off_GBps", "crc32_GBps"} <= set(row["extra"])
    for name in samples:
        assert rows[name]["unit"] == "msgs/s" and rows[name]["ratio"] > 0


def test_transport_bench_payloads() -> None:
    sd = transport_bench.state_dict(12)
    assert 11e6 < sum(t.numel() * t.element_size() for t in sd.values()) < 14e6
    batch = transport_bench.sample_batch()
    assert len(batch.samples) == 16 and all(len(s.response_ids) == 200 for s in batch.samples)


@pytest.mark.integration
def test_engines_bench_reports_every_ratio(smollm2, tmp_path: Path) -> None:
    """`atgrpo-bench engines --quick` on the real model: throughput of both engines against
    transformers' generate, reload against a fresh start, and the logprob mismatch against its bound."""
    out = tmp_path / "engines.json"
    result = subprocess.run(
        [sys.executable, "-m", "atgrpo.bench.cli", "engines", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "ratio" in result.stdout
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    identity = {f"{e} engine greedy tokens identical to transformers, batch 4" for e in ("vllm", "torch")}
    assert set(rows) == identity | {
        "vllm engine tokens/s, batch 4",
        "torch engine tokens/s, batch 4",
        "vllm engine weight reload",
        "torch engine weight reload",
        "vllm engine vs learner logprob mismatch",
        "torch engine vs learner logprob mismatch",
    }
    assert all(
        r["value"] > 0 and r["reference_value"] > 0 and r["ratio"] > 0
        for name, r in rows.items()
        if name not in identity
    )
    # fp32 greedy decoding may part from transformers' after a near tie, so identity is a share, not a must.
    for name in identity:
        assert 0.0 <= rows[name]["value"] <= 1.0 and 0.0 <= rows[name]["extra"]["agreeing_prefix"] <= 1.0
    for name in ("vllm engine vs learner logprob mismatch", "torch engine vs learner logprob mismatch"):
        assert rows[name]["target_met"], rows[name]
