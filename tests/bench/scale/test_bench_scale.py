"""`atgrpo-bench scale --quick`: the real hub against simulated actors on tiny sizes, end to end
through the CLI; and the cluster model against hand-computed times."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from atgrpo.bench.scale import model as scale_model


@pytest.mark.integration
def test_scale_quick_runs_the_real_hub_against_simulated_actors(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "atgrpo.bench.cli",
            "scale",
            "--quick",
            "--json",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "weight sync per step, predicted" in result.stdout and "hub thread at N=8" in result.stdout
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    detail = json.loads((tmp_path / "bench-results" / "scale-detail.json").read_text())
    for r in detail["per_n"]:
        n = r["n"]
        assert r["actor_errors"] == [] and r["samples_refused"] == 0 and r["units_refused"] == 0
        assert r["lease_p50_ms"] > 0 and r["samples_per_s"] > 0
        hub, store = r["sync_hub"], r["sync_store"]
        assert 1 <= hub["holders"] <= n and 1 <= store["holders"] <= n
        # From the hub: one copy (and its headers) per actor that fetched; through the store: one, whatever N.
        copies = hub["bytes_out"] / r["one_copy_bytes"]
        assert hub["holders"] <= copies < hub["holders"] * 1.01
        assert 1 <= store["bytes_out"] / r["one_copy_bytes"] < 1.01
        assert r["store_reads"]["store/chunks_from_hub"] == 0 and r["store_reads"]["store/chunks_read"] > 0
    last = [r for name, r in rows.items() if name.startswith("units reissued, units and samples refused")]
    assert len(last) == 1 and last[0]["target_met"] is True
    assert any(name.startswith("predicted sync through the store, Qwen3-8B N=256") for name in rows)


def test_cluster_model_against_hand_computed_times() -> None:
    w = scale_model.MODELS["Qwen3-1.7B"]
    fig = {
        "n": 8,
        "sync_hub": {"seconds": 2.0, "bytes_out": 8e9, "hub_cpu_s": 0.5},
        "sync_store": {"seconds": 1.0, "bytes_out": 1e9, "hub_cpu_s": 0.1},
    }
    model = scale_model.predict([fig, {**fig, "n": 128}], link_gbit=100.0, store_gbytes=50.0)
    row = next(r for r in model["rows"] if r["model"] == "Qwen3-1.7B" and r["actors"] == 64)
    # The hub pushes 16 GB per CPU second here, so its NIC (12.5 GB/s) bounds it: 64 copies over it.
    assert row["hub_s"] == pytest.approx(64 * w / 12.5e9)
    # One copy written at 12.5 GB/s, then 64 readers sharing 50 GB/s (0.78 GB/s each, under their NIC).
    assert row["store_s"] == pytest.approx(w / 12.5e9 + w / (50e9 / 64))
    slow = scale_model.predict([{**fig, "sync_hub": {**fig["sync_hub"], "hub_cpu_s": 8.0}}], link_gbit=100.0)
    row = next(r for r in slow["rows"] if r["model"] == "Qwen3-1.7B" and r["actors"] == 8)
    assert row["hub_s"] == pytest.approx(8 * w / 1e9)  # 1 GB per CPU second: the hub, not the NIC, bounds it
    assert math.isclose(model["measured_growth"]["hub"], 1.0)
