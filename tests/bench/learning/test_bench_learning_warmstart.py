"""`atgrpo-bench learning warmstart`: the adapters it evaluates at each step count are the ones a warm
start of that many steps ends with, and each is evaluated on the held-out levels."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from atgrpo.bench import cli as bench_cli
from atgrpo.bench.learning import cli
from atgrpo.config import dump_config, load_config
from atgrpo.models.adapters import read_adapter
from atgrpo.paths import warm_adapter_dir
from atgrpo.warmstart.prepare import prepare_models

TINY = "{hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1}"


def write_config(tmp_path: Path, b_lora: bool = True) -> Path:
    """Two LoRA policies (plan -> a, tool -> b) on one built tiny base (b_lora False: b is full)."""
    cfg = load_config(
        None,
        [
            f"run.out_dir='{tmp_path / 'unused'}'",
            "warmstart.batch_size=4",
            "role_policy={plan='a', tool='b'}",
            f"policies.a.tiny={TINY}",
            f"policies.b.tiny={TINY}",
            "policies.a.lora={r=4, alpha=8.0}",
            *(["policies.b.lora={r=4, alpha=8.0}"] if b_lora else []),
        ],
    )
    path = tmp_path / "lora.toml"
    path.write_text(dump_config(cfg))
    return path


def test_each_count_is_evaluated_with_the_adapters_a_warm_start_that_long_ends_with(tmp_path: Path) -> None:
    config, out = write_config(tmp_path), tmp_path / "sweep"
    argv = ["warmstart", str(config), "--lr", "1e-2,1e-2", "--at", "3,0,2,2", "--levels", "3", "--out", str(out)]
    assert cli.main([*argv, "--json", str(tmp_path / "sweep.json")]) == 0
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert [(r["lr"], r["steps"], r["levels"]) for r in rows] == [(1e-2, 0, 3), (1e-2, 2, 3), (1e-2, 3, 3)]
    assert all(0.0 <= r["success"] <= 1.0 and r["warmstart_s"] >= 0 for r in rows)
    assert all(math.isnan(v) for v in rows[0]["loss"].values())  # no step before count 0
    assert all(math.isfinite(v) and v > 0 for r in rows[1:] for v in r["loss"].values())
    # Count 0 is the adapter as peft makes it (B zero): the base's own behaviour.
    start = read_adapter(out / "lr0.01" / "step0" / "a")[1]
    assert all(not t.any() for k, t in start.items() if "lora_B" in k)
    # Counts 2 and 3 are what a warm start of that many steps saves (the run's own code), bit for bit.
    for steps in (2, 3):
        cfg = load_config(
            config, ["warmstart.lr=1e-2", f"warmstart.steps={steps}", f"run.out_dir='{tmp_path / str(steps)}'"]
        )
        prepare_models(cfg)
        for p in ("a", "b"):
            mine = read_adapter(out / "lr0.01" / f"step{steps}" / p)[1]
            run = read_adapter(warm_adapter_dir(cfg, p))[1]
            assert set(mine) == set(run) and all(torch.equal(mine[k], run[k]) for k in run), (steps, p)
    a2, b2 = (read_adapter(out / "lr0.01" / "step2" / p)[1] for p in ("a", "b"))
    assert any(not torch.equal(a2[k], b2[k]) for k in a2 if "lora_B" in k)  # each on its own role's demos


def test_a_config_with_a_full_policy_is_refused_with_its_name(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path, b_lora=False)
    assert cli.main(["warmstart", str(config), "--at", "1", "--levels", "2", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "['b']" in err and "lora" in err


def test_bad_counts_are_refused_by_the_parser(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path)
    for bad in ("x", "-1", "", "0"):  # "0": no count with a step to train
        try:
            cli.main(["warmstart", str(config), "--at", bad])
        except SystemExit as exc:
            assert exc.code == 2
        else:
            raise AssertionError(f"--at {bad!r} accepted")
    assert "--at" in capsys.readouterr().err


def test_its_help_is_reached_from_atgrpo_bench_learning(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        bench_cli.main(["learning", "warmstart", "--help"])
    assert done.value.code == 0 and "usage: atgrpo-bench learning warmstart " in capsys.readouterr().out
