"""A learner SIGKILLed in the middle of a checkpoint write (issue 13, fault suite): `latest` still names
the previous complete checkpoint, which loads with its weights, and the resumed run writes the same
step again over the half-written folder. Killed in the middle of removing an old checkpoint
(retention, issue 18): `latest` loads, and the resumed run's next checkpoint finishes the removal.

A child process stands for the learner: it writes checkpoint 1, changes its weights (a stand-in for a
training step) and starts checkpoint 2, in which a patched writer leaves half a file (or, for the
link, stops before the rename), says so on stdout and sleeps until this test SIGKILLs it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import atgrpo
from atgrpo.config import load_config
from atgrpo.learner.checkpoints import RunState, latest_checkpoint, step_folder
from atgrpo.learner.trainer import Trainer
from atgrpo.models.folder import load_model
from atgrpo.models.tied import without_aliases
from atgrpo.models.tiny import build_tiny_model

pytestmark = pytest.mark.integration

CHILD = r"""
import io, os, sys, time
from pathlib import Path

import torch

from atgrpo.config import load_config
from atgrpo.learner.checkpoints import RunState
from atgrpo.learner.trainer import Trainer

out, model_dir, point = sys.argv[1:4]
cfg = load_config(None, [f'run.out_dir="{out}"', f'policies.shared.path="{model_dir}"'])
trainer = Trainer(cfg)


def bump():
    with torch.no_grad():
        for p in trainer.backends["shared"].model.parameters():
            p.add_(1.0)


def killed_here():
    print("writing", flush=True)
    time.sleep(600)


real_save, real_replace = torch.save, os.replace


def half_save(obj, f, *args, **kwargs):
    if Path(f).name == point:  # half of the real bytes on disk, then killed
        buf = io.BytesIO()
        real_save(obj, buf, *args, **kwargs)
        with open(f, "wb") as dest:
            dest.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            dest.flush()
            os.fsync(dest.fileno())
        killed_here()
    return real_save(obj, f, *args, **kwargs)


def replace(src, dst, *args, **kwargs):
    if Path(dst).name == point:  # the new link made, not yet renamed over `latest`
        killed_here()
    return real_replace(src, dst, *args, **kwargs)


bump()
trainer.checkpoint(Path(out) / "checkpoints", RunState(1, {"shared": 1}, 0.5), rank0=True)
bump()
torch.save, os.replace = half_save, replace
trainer.checkpoint(Path(out) / "checkpoints", RunState(2, {"shared": 2}, 0.5), rank0=True)
print("finished", flush=True)
"""

PRUNE_CHILD = r"""
import os, sys, time
from pathlib import Path

import torch

from atgrpo.config import load_config
from atgrpo.learner import retention
from atgrpo.learner.checkpoints import RunState
from atgrpo.learner.trainer import Trainer

out, model_dir, _ = sys.argv[1:4]
cfg = load_config(None, [f'run.out_dir="{out}"', f'policies.shared.path="{model_dir}"', "run.keep_checkpoints=1"])
trainer = Trainer(cfg)


def bump():
    with torch.no_grad():
        for p in trainer.backends["shared"].model.parameters():
            p.add_(1.0)


def half_rmtree(path, *args, **kwargs):  # half of the files gone, then killed
    files = sorted(f for f in Path(path).rglob("*") if f.is_file())
    for f in files[: len(files) // 2]:
        f.unlink()
    print("removing", flush=True)
    time.sleep(600)


bump()
trainer.checkpoint(Path(out) / "checkpoints", RunState(1, {"shared": 1}, 0.5), rank0=True)
bump()
retention.shutil.rmtree = half_rmtree
trainer.checkpoint(Path(out) / "checkpoints", RunState(2, {"shared": 2}, 0.5), rank0=True)
print("finished", flush=True)
"""


def bump(trainer: Trainer) -> None:
    """What the child does between checkpoints: every weight + 1."""
    with torch.no_grad():
        for p in trainer.backends["shared"].model.parameters():
            p.add_(1.0)


def published(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A saved model's weights as an export holds them: each tied tensor once (`models.tied`)."""
    return without_aliases(model, model.state_dict())


def assert_weights(got: dict[str, torch.Tensor], fresh: dict[str, torch.Tensor], bumps: int) -> None:
    """`got` is `fresh` after `bumps` times `bump`, exactly."""
    assert got.keys() == fresh.keys()
    for k, v in fresh.items():
        want = v.clone()
        for _ in range(bumps):
            want.add_(1.0)
        assert torch.equal(got[k], want), k


def kill_mid_write(
    out: Path, model_dir: Path, point: str, log: Path, script: str = CHILD, says: str = "writing"
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(atgrpo.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    with log.open("w") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(out), str(model_dir), point],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
        try:
            assert child.stdout is not None
            deadline = time.monotonic() + 180
            line = ""  # other lines may come first (libraries print to stdout)
            while line not in (f"{says}\n", "exited") and time.monotonic() < deadline:
                if select.select([child.stdout], [], [], 1.0)[0]:
                    line = child.stdout.readline() or "exited"
            assert line == f"{says}\n", f"child: {line!r}\n{log.read_text()[-3000:]}"
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


@pytest.mark.parametrize("point", ["learner.pt", "rng.pt", "latest"])
def test_a_learner_killed_mid_checkpoint_resumes_from_the_previous_one(tmp_path: Path, point: str) -> None:
    """Killed writing the first file of checkpoint 2 (`learner.pt`), its last one (`rng.pt`: the
    model folder and state.json are already there) or while marking it the latest."""
    out, model_dir = tmp_path / "run", tmp_path / "model"
    cfg = load_config(None, [f'run.out_dir="{out}"', f'policies.shared.path="{model_dir}"'])
    build_tiny_model(cfg.policies["shared"].tiny, model_dir)
    kill_mid_write(out, model_dir, point, tmp_path / "child.log")

    root = out / "checkpoints"
    first, second = step_folder(root, 1), step_folder(root, 2)
    assert latest_checkpoint(root) == first
    assert second.is_dir()  # the half-written checkpoint is still there
    if point != "latest":
        assert (second / "shared" / "learner.pt").is_file() or (second / "rng.pt").is_file()

    # The previous checkpoint loads, with the weights it was written with.
    trainer = Trainer(cfg)
    fresh = trainer.backends["shared"].export_weights()
    assert trainer.load(latest_checkpoint(root)) == RunState(1, {"shared": 1}, 0.5)
    assert trainer.versions == {"shared": 1}
    assert_weights(trainer.backends["shared"].export_weights(), fresh, 1)
    assert_weights(published(load_model(root / "latest" / "shared" / "model")), fresh, 1)

    # The resumed run writes step 2 again, over the half-written folder, and it loads.
    bump(trainer)
    assert trainer.checkpoint(root, RunState(2, {"shared": 2}, 0.5), rank0=True) == second
    assert latest_checkpoint(root) == second
    assert sorted(p.name for p in root.iterdir()) == ["latest", first.name, second.name]  # no stray link
    again = Trainer(cfg)
    assert again.load(latest_checkpoint(root)) == RunState(2, {"shared": 2}, 0.5)
    assert_weights(again.backends["shared"].export_weights(), fresh, 2)
    assert_weights(published(load_model(root / "latest" / "shared" / "model")), fresh, 2)


def test_a_learner_killed_mid_removal_resumes_and_the_next_checkpoint_finishes_it(tmp_path: Path) -> None:
    """`run.keep_checkpoints = 1`: killed while deleting checkpoint 1 once checkpoint 2 is complete."""
    out, model_dir = tmp_path / "run", tmp_path / "model"
    cfg = load_config(None, [f'run.out_dir="{out}"', f'policies.shared.path="{model_dir}"', "run.keep_checkpoints=1"])
    build_tiny_model(cfg.policies["shared"].tiny, model_dir)
    kill_mid_write(out, model_dir, "", tmp_path / "child.log", script=PRUNE_CHILD, says="removing")

    root = out / "checkpoints"
    first, second = step_folder(root, 1), step_folder(root, 2)
    leftover = root / f".{first.name}.deleting"
    assert sorted(p.name for p in root.iterdir()) == [leftover.name, "latest", second.name]
    assert any(leftover.rglob("*")) and latest_checkpoint(root) == second

    # The latest checkpoint loads whole; the resumed run's next checkpoint removes the leftover and step 2.
    trainer = Trainer(cfg)
    fresh = trainer.backends["shared"].export_weights()
    assert trainer.load(latest_checkpoint(root)) == RunState(2, {"shared": 2}, 0.5)
    assert_weights(trainer.backends["shared"].export_weights(), fresh, 2)
    assert_weights(published(load_model(root / "latest" / "shared" / "model")), fresh, 2)
    bump(trainer)
    third = trainer.checkpoint(root, RunState(3, {"shared": 3}, 0.5), rank0=True)
    assert sorted(p.name for p in root.iterdir()) == ["latest", third.name]
    assert Trainer(cfg).load(latest_checkpoint(root)) == RunState(3, {"shared": 3}, 0.5)
