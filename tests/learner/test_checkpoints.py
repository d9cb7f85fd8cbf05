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
    RunState,
    check_and_write_config,
    config_changes,
    latest_checkpoint,
    mark_latest,
    read_state,
    step_folder,
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


class FakeCuda:
    """`torch.cuda` as a process with `devices` GPUs sees it (initialised or not), with one RNG state
    per device; records what the code under test asks of it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, devices: int, initialised: bool = True) -> None:
        self.states = [torch.full((16,), 10 * i + 1, dtype=torch.uint8) for i in range(devices)]
        self.calls: list[str] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: devices > 0)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", self.get_all)
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", self.set_all)

    def get_all(self) -> list[torch.Tensor]:
        self.calls.append("get")
        assert self.states, "asked for the RNG states of no device"
        return [s.clone() for s in self.states]

    def set_all(self, states) -> None:
        states = list(states)
        self.calls.append(f"set {len(states)}")
        assert len(states) <= len(self.states), "set the RNG state of a device that does not exist"
        self.states[: len(states)] = [s.clone() for s in states]


def write_on_gpu(folder: Path, devices: int) -> list[torch.Tensor]:
    """`write_state` in a process with `devices` GPUs; returns their saved states."""
    with pytest.MonkeyPatch.context() as mp:
        gpu = FakeCuda(mp, devices)
        write_state(folder, RunState(3, {"shared": 3}, None))
        assert gpu.calls == ["get"]
        return gpu.states


def test_cuda_rng_states_come_back_on_as_many_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = write_on_gpu(tmp_path, 2)
    gpu = FakeCuda(monkeypatch, 2)
    gpu.states = [torch.zeros(16, dtype=torch.uint8) for _ in range(2)]  # the generators moved on since
    assert read_state(tmp_path) == RunState(3, {"shared": 3}, None)
    assert gpu.calls == ["set 2"]
    assert all(torch.equal(a, b) for a, b in zip(gpu.states, saved, strict=True))


@pytest.mark.parametrize("devices", [1, 4])
def test_a_different_device_count_restores_the_devices_both_have(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    devices: int,
) -> None:
    saved = write_on_gpu(tmp_path, 2)
    gpu = FakeCuda(monkeypatch, devices)
    untouched = [s.clone() for s in gpu.states]
    with caplog.at_level("WARNING", logger="atgrpo.learner"):
        read_state(tmp_path)
    both = min(devices, 2)
    assert gpu.calls == [f"set {both}"]
    assert all(torch.equal(gpu.states[i], saved[i]) for i in range(both))
    assert all(torch.equal(gpu.states[i], untouched[i]) for i in range(both, devices))
    assert (
        f"CUDA RNG states of 2 devices, this process sees {devices}" in caplog.text and "not bit-exact" in caplog.text
    )


def test_a_gpu_checkpoint_loads_on_cpu_and_a_cpu_one_on_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_written, cpu_written = tmp_path / "gpu", tmp_path / "cpu"
    gpu_written.mkdir()
    cpu_written.mkdir()
    torch.manual_seed(5)
    write_on_gpu(gpu_written, 2)
    want = torch.rand(1).item()
    with monkeypatch.context() as mp:
        FakeCuda(mp, 0)  # no CUDA here
        torch.manual_seed(6)
        assert read_state(gpu_written).step == 3
        assert torch.rand(1).item() == want  # the CPU states still come back
        FakeCuda(mp, 0)
        write_state(cpu_written, RunState(4, {"shared": 4}, None))
    assert "cuda" not in torch.load(cpu_written / "rng.pt", weights_only=False)
    gpu = FakeCuda(monkeypatch, 2)
    before = [s.clone() for s in gpu.states]
    assert read_state(cpu_written).step == 4
    assert gpu.calls == []  # nothing saved, nothing set: the CUDA generators keep their seeds
    assert all(torch.equal(a, b) for a, b in zip(gpu.states, before, strict=True))


def test_cuda_a_process_has_not_initialised_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU learner on a GPU host: asking for CUDA RNG states would create a context on every GPU."""
    idle = FakeCuda(monkeypatch, 2, initialised=False)
    write_state(tmp_path, RunState(1, {"shared": 1}, None))
    assert "cuda" not in torch.load(tmp_path / "rng.pt", weights_only=False)
    write_on_gpu(tmp_path, 2)
    read_state(tmp_path)
    assert idle.calls == []


def test_checkpoints_of_older_formats_still_load(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text('{"step": 2, "versions": {"shared": 2}}')
    torch.manual_seed(9)
    torch.save({"torch_rng": torch.random.get_rng_state()}, tmp_path / "rng.pt")
    want = torch.rand(1).item()
    assert read_state(tmp_path) == RunState(2, {"shared": 2}, None)
    assert torch.rand(1).item() == want


def test_resume_refuses_a_config_that_changes_what_is_learned(tmp_path: Path) -> None:
    out = tmp_path / "run"
    constant = 'policies.shared.lr_schedule="constant"'  # run.steps sets no lr: a resume may change it
    first = load_config(None, [f'run.out_dir="{out}"', "run.steps=2", constant])
    check_and_write_config(first, out, resuming=False)
    assert load_config(out / "config.toml") == first

    longer = load_config(
        None,
        [
            f'run.out_dir="{out}"',
            "run.steps=4",
            "launch.actors=3",
            "run.time_limit_s=0",
            "run.keep_checkpoints=0",
            "run.keep_checkpoint_steps=[20, 40]",
            constant,
        ],
    )
    assert config_changes(first, longer) == []
    check_and_write_config(longer, out, resuming=True)  # schedule and plumbing may change

    changed = load_config(None, [f'run.out_dir="{out}"', "run.steps=4", "rollout.k=8", "train.clip_eps=0.3", constant])
    with pytest.raises(ConfigChangedError, match=r"rollout\.k.*train\.clip_eps|train\.clip_eps.*rollout\.k"):
        check_and_write_config(changed, out, resuming=True)
    assert load_config(out / "config.toml") == longer  # the refused config was not written

    asked = load_config(None, [f'run.out_dir="{out}"', "rollout.k=8", "run.allow_config_change=true"])
    check_and_write_config(asked, out, resuming=True)
    assert load_config(out / "config.toml").rollout.k == 8


def test_under_a_decaying_lr_the_step_budget_is_what_is_learned(tmp_path: Path) -> None:
    out = tmp_path / "run"
    sets = [f'run.out_dir="{out}"', 'policies.shared.lr_schedule="linear"']
    first = load_config(None, [*sets, "run.steps=2"])
    assert config_changes(first, load_config(None, [*sets, "run.steps=4"])) == ["run.steps"]  # the decay's horizon
    assert config_changes(first, load_config(None, [*sets, "run.steps=2", "run.eval_every=1"])) == []


def _mount_tmpfs(where: Path, size_bytes: int) -> bool:
    import subprocess

    if os.geteuid() != 0:
        return False
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(where)], capture_output=True
    )
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
