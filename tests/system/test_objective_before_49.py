"""With every setting of issue 49 off, a whole run is, bit for bit, the run of the code before them.

The code before issue 49 is the tree of `BEFORE` (the parent of its first commit, the advantage
kernel's `scale_by_std`), taken from this clone's history with `git archive`; its Rust extension is
built apart (maturin, a private target folder) so that each tree runs its own kernels. Both trees
make the same tiny strict run of the built-in defaults. The final weights must be equal tensor for
tensor, and every step's loss, grad norm, clip fraction and rewards the same float. The warm start
is long enough that rewards differ inside groups and most steps update (checked, so the comparison
cannot pass on a run that never trained).

Pipelined mode is not compared whole: a pipelined run does not repeat itself even under one tree,
since which version samples a unit depends on when the learner publishes (three runs of one config
had 0.125, 0.5 and 1.0 as step 2's mean staleness). Its loss with every new setting off, the
importance-weighted one, is compared with the old loss bit for bit in
tests/learner/test_loss_objective.py.

The pin is a tree of the past: a later change that alters the default run's numbers on purpose ends
what this test can check, and retires it (say so in that change). Skipped, saying why, where the
clone lacks the commit (a shallow clone) or maturin.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from systest_util import TINY_MODEL, run_train, train_rows

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "35696c2"
"""The last commit before issue 49's code (919204d, the advantage kernel's scale_by_std, came next)."""
BUILD_TIMEOUT_S = 900.0
STEPS = 6
SETS = [
    f"run.steps={STEPS}",
    "run.checkpoint_every=2",
    "run.eval_seeds=4",
    "warmstart.steps=40",
    "warmstart.batch_size=8",
    "rollout.envs_per_step=16",
    "rollout.envs_per_unit=4",
    "rollout.max_new_tokens=16",
    "task.env={width=6,height=6}",
    "metrics.tensorboard=false",
    "launch.actors=1",
    *(f"policies.shared.tiny.{k}={v}" for k, v in TINY_MODEL.items()),
    'policies.shared.lr_schedule="constant"',
]
"""Written out here, not taken from `tiny_sets` (whose keys grow with today's config): the old tree
must know every key. The tiny model's shape is the system tests' one, `TINY_MODEL`."""
SAME = (
    "rollout/samples",
    "rollout/reward_mean",
    "rollout/success",
    "advantage/abs_mean",
    "learner/shared/loss",
    "learner/shared/grad_norm",
    "learner/shared/clip_frac",
    "learner/shared/tokens",
)
"""Per-step metrics both trees log that depend only on what was sampled and trained."""


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def before_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `BEFORE` tree with its own extension built in: the folder to put on PYTHONPATH."""
    if shutil.which("git") is None or _git("cat-file", "-e", f"{BEFORE}^{{commit}}").returncode != 0:
        pytest.skip(f"commit {BEFORE} is not in this clone's history (a shallow clone?): nothing to compare with")
    if shutil.which("maturin") is None:
        pytest.skip("maturin is not installed: the old tree's extension cannot be built")
    tree = tmp_path_factory.mktemp("before49")
    archive = _git("archive", "--format=tar", BEFORE)
    assert archive.returncode == 0, archive.stderr.decode(errors="replace")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    wheels = tree / "wheels"
    build = subprocess.run(
        ["maturin", "build", "--release", "-o", str(wheels)],
        cwd=tree,
        env={**os.environ, "CARGO_TARGET_DIR": str(tree / "target")},
        capture_output=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert build.returncode == 0, build.stderr.decode(errors="replace")[-4000:]
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        (lib,) = [n for n in z.namelist() if n.endswith((".so", ".pyd"))]
        (tree / "python" / lib).write_bytes(z.read(lib))
    return tree / "python"


def _final_weights(out: Path) -> dict[str, torch.Tensor]:
    path = out / f"checkpoints/step_{STEPS:06d}/shared/learner.pt"
    return torch.load(path, weights_only=True)["model"]


def test_a_run_with_every_new_setting_off_is_the_run_before_them(before_tree: Path, tmp_path: Path) -> None:
    config = ROOT / "envs" / "defaults.toml"  # names nothing: both trees run their built-in defaults
    runs = {}
    for tag, tree in (("before", before_tree), ("now", None)):
        out = tmp_path / tag
        run = run_train(out, [*SETS, f"run.out_dir={json.dumps(str(out))}"], config=config, python_tree=tree)
        assert run.returncode == 0, f"{tag}: {run.output[-4000:]}"
        runs[tag] = out

    before, now = train_rows(runs["before"] / "metrics.jsonl"), train_rows(runs["now"] / "metrics.jsonl")
    assert sorted(before) == sorted(now) == list(range(1, STEPS + 1))
    # The old tree really ran: it predates this metric, which today's code logs every step.
    assert "advantage/informative_groups" not in before[1] and "advantage/informative_groups" in now[1]
    for step in before:
        differ = {k: (before[step].get(k), now[step].get(k)) for k in SAME if before[step].get(k) != now[step].get(k)}
        assert not differ, f"step {step}: {differ}"
    trained = [s for s in now if now[s]["learner/shared/grad_norm"] > 0]
    assert len(trained) >= STEPS // 2, f"only steps {trained} updated: the comparison would show little"

    old_w, new_w = _final_weights(runs["before"]), _final_weights(runs["now"])
    assert old_w.keys() == new_w.keys()
    assert all(torch.equal(old_w[k], new_w[k]) for k in old_w), "the final weights differ"
