"""`atgrpo-bench learning forks`: each strategy's exact program, how likely the tool's model makes it.
On a built, untrained tiny model (no warm start): the figures are probabilities of disjoint token
sequences, one row per strategy of the task's mix; a run that is not program mode is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atgrpo.bench.learning.forks import main, models_of
from atgrpo.config import load_config
from atgrpo.warmstart.prepare import prepare_models
from atgrpo.warmstart.program_mix import mix_of

ROOT = Path(__file__).resolve().parents[3]


def _run_folder(tmp_path: Path, config: str, *extra: str) -> Path:
    out = tmp_path / "run"
    cfg = load_config(ROOT / config, [f'run.out_dir="{out}"', "warmstart.steps=0", *extra])
    prepare_models(cfg)
    (out / "config.toml").write_text(cfg.to_toml())
    return out


@pytest.mark.parametrize("config", ["envs/sudoku/train_program.toml", "envs/planpath/train_program.toml"])
def test_every_strategy_gets_a_probability_and_they_are_disjoint(tmp_path: Path, config: str) -> None:
    run = _run_folder(tmp_path, config)
    assert [label for label, _ in models_of(run, load_config(run / "config.toml"))] == ["warm start"]
    assert main([str(run), "--levels", "2", "--json", str(tmp_path / "forks.json")]) == 0
    odds = json.loads((tmp_path / "forks.json").read_text())["models"]["warm start"]
    task = load_config(run / "config.toml").task.task
    assert set(odds) == set(mix_of(task))
    # Different programs are different sequences: their probabilities can only sum to at most 1.
    for key in ("p_t1", "p_rollout"):
        assert 0.0 <= sum(f[key] for f in odds.values()) <= 1.0 + 1e-6
    assert all(f["tokens"] > 20 for f in odds.values())


def test_a_run_that_is_not_program_mode_is_refused(tmp_path: Path, capsys) -> None:
    run = _run_folder(tmp_path, "envs/planpath/train_program.toml", 'task.tool_mode="answer"')
    assert main([str(run)]) == 1
    assert "not a program-mode run" in capsys.readouterr().err


def test_only_complete_checkpoints_are_read_in_step_order(tmp_path: Path) -> None:
    import shutil

    run = _run_folder(tmp_path, "envs/sudoku/train_program.toml")
    cfg = load_config(run / "config.toml")
    for step, complete in ((40, True), (20, True), (60, False)):  # step 60: a crashed write
        folder = run / "checkpoints" / f"step_{step:06d}"
        shutil.copytree(run / "models" / "shared", folder / "shared" / "model")
        if complete:
            (folder / "COMPLETE").touch()
    assert [label for label, _ in models_of(run, cfg)] == ["warm start", "step 20", "step 40"]


def test_bad_input_is_refused_saying_why(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path)]) == 1
    assert "no config.toml" in capsys.readouterr().err
    (tmp_path / "config.toml").write_text("[run\nsteps = ")
    assert main([str(tmp_path)]) == 1
    assert str(tmp_path / "config.toml") in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path), "--levels", "0"])
    assert exited.value.code == 2 and "--levels must be at least 1" in capsys.readouterr().err
