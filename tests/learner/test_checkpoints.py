"""Run state on disk: `latest` is a usable path replaced atomically, RNG states come back, and a
resume refuses a config that changes what the run learns."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from atgrpo.config import load_config
from atgrpo.errors import ConfigChangedError
from atgrpo.learner.checkpoints import (
    RunState, check_and_write_config, config_changes, latest_checkpoint, mark_latest, read_state, step_folder,
    write_state,
)


def test_latest_is_a_link_to_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    for step in (2, 4):
        folder = step_folder(tmp_path, step)
        (folder / "shared" / "model").mkdir(parents=True)
        (folder / "shared" / "model" / "config.json").write_text("{}")
        mark_latest(folder)
        assert latest_checkpoint(tmp_path) == folder
        assert os.readlink(tmp_path / "latest") == folder.name  # relative: the run folder can move
        assert (tmp_path / "latest" / "shared" / "model" / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_000002", "step_000004"]


def test_a_text_marker_of_older_runs_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "step_000003").mkdir()
    (tmp_path / "latest").write_text("step_000003\n")
    assert latest_checkpoint(tmp_path) == tmp_path / "step_000003"


def test_rng_states_are_restored(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    write_state(tmp_path, RunState(7, {"shared": 7}, 0.25))
    want = (random.random(), np.random.random(), torch.rand(1).item())
    random.seed(10)
    np.random.seed(20)
    torch.manual_seed(30)
    state = read_state(tmp_path)
    assert state == RunState(7, {"shared": 7}, 0.25)
    assert (random.random(), np.random.random(), torch.rand(1).item()) == want


def test_resume_refuses_a_config_that_changes_what_is_learned(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = load_config(None, [f'run.out_dir="{out}"', "run.steps=2"])
    check_and_write_config(first, out, resuming=False)
    assert load_config(out / "config.toml") == first

    longer = load_config(None, [f'run.out_dir="{out}"', "run.steps=4", "launch.actors=3", "run.time_limit_s=0"])
    assert config_changes(first, longer) == []
    check_and_write_config(longer, out, resuming=True)  # schedule and plumbing may change

    changed = load_config(None, [f'run.out_dir="{out}"', "run.steps=4", "rollout.k=8", "train.clip_eps=0.3"])
    with pytest.raises(ConfigChangedError, match=r"rollout\.k.*train\.clip_eps|train\.clip_eps.*rollout\.k"):
        check_and_write_config(changed, out, resuming=True)
    assert load_config(out / "config.toml") == longer  # the refused config was not written

    asked = load_config(None, [f'run.out_dir="{out}"', "rollout.k=8", "run.allow_config_change=true"])
    check_and_write_config(asked, out, resuming=True)
    assert load_config(out / "config.toml").rollout.k == 8


def _mount_tmpfs(where: Path, size_bytes: int) -> bool:
    import subprocess

    if os.geteuid() != 0:
        return False
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


def test_disk_full_while_checkpointing_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    """A checkpoint that does not fit is removed and reported; `latest` still names the previous one,
    which loads."""
    import subprocess

    from atgrpo.errors import CheckpointWriteError
    from atgrpo.learner.trainer import Trainer
    from atgrpo.models.tiny import build_tiny_model

    model_dir = tmp_path / "model"
    cfg0 = load_config(None, [f'run.out_dir="{tmp_path / "sizing"}"', f'policies.shared.path="{model_dir}"'])
    build_tiny_model(cfg0.policies["shared"].tiny, model_dir)
    sizing = Trainer(cfg0).checkpoint(tmp_path / "sizing", RunState(1, {"shared": 1}, 0.5), rank0=True)
    one = sum(f.stat().st_size for f in sizing.rglob("*") if f.is_file())
    small = tmp_path / "small"
    if not _mount_tmpfs(small, one + one // 2):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        cfg = load_config(None, [f'run.out_dir="{small}"', f'policies.shared.path="{model_dir}"'])
        trainer = Trainer(cfg)
        first = trainer.checkpoint(small / "checkpoints", RunState(1, {"shared": 1}, 0.5), rank0=True)
        with pytest.raises(CheckpointWriteError, match=r"step_000002.*still .*step_000001"):
            trainer.checkpoint(small / "checkpoints", RunState(2, {"shared": 2}, 0.5), rank0=True)
        assert latest_checkpoint(small / "checkpoints") == first
        assert not (small / "checkpoints" / "step_000002").exists()  # no half-written folder left
        assert Trainer(cfg).load(first) == RunState(1, {"shared": 1}, 0.5)
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)
