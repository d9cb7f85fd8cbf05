"""Exact resume: 2 steps, stop, resume to 4 ends with the same weights, optimizer state and metrics
as 4 steps straight (the shared reference run, checkpoint every 2 steps)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from systest_util import (
    REFERENCE_STEPS,
    Processes,
    Run,
    child_env,
    module_cmd,
    read_rows,
    run_direct,
    set_args,
    tiny_sets,
    train_rows,
)

pytestmark = pytest.mark.integration

SAME = (
    "rollout/samples",
    "rollout/reward_mean",
    "rollout/reward_team_mean",
    "rollout/reward_local_mean",
    "rollout/response_len_mean",
    "rollout/success",
    "rollout/episode_return",
    "learner/samples",
    "learner/groups",
    "advantage/abs_mean",
    "learner/shared/loss",
    "learner/shared/grad_norm",
    "learner/shared/clip_frac",
    "learner/shared/logprob_mismatch",
    "learner/shared/tokens",
    "learner/shared/version",
)


def load(out: Path, step: int) -> dict:
    return torch.load(out / f"checkpoints/step_{step:06d}/shared/learner.pt", weights_only=True)


def assert_same_tensors(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same_tensors(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def test_stop_and_resume_equals_straight_run(tmp_path: Path, processes: Processes, reference_run: Run) -> None:
    assert REFERENCE_STEPS == 4
    out = tmp_path / "split"
    run_direct(out, tiny_sets(out, run__steps=2, run__checkpoint_every=2), processes)
    assert os.readlink(out / "checkpoints/latest") == "step_000002"
    # Resuming with a config that changes what is learned is refused before anything is loaded.
    changed = subprocess.run(
        module_cmd("atgrpo.cli.learner", *set_args(tiny_sets(out, run__steps=4, rollout__k=2))),
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert changed.returncode == 2, changed.stderr[-3000:]
    assert "rollout.k changed" in changed.stderr and '{"type":"failed"' in changed.stdout
    log = run_direct(out, tiny_sets(out, run__steps=4, run__checkpoint_every=2), processes)
    assert "resumed from" in log and "at step 2" in log

    ref = reference_run.out_dir
    assert os.readlink(out / "checkpoints/latest") == "step_000004"
    state = json.loads((out / "checkpoints/step_000004/state.json").read_text())
    assert state["step"] == 4 and state["versions"] == {"shared": 4}
    mine, straight = load(out, 4), load(ref, 4)
    assert_same_tensors(mine["model"], straight["model"], "model")
    assert_same_tensors(mine["optimizer"], straight["optimizer"], "optimizer")

    # The summary of the resumed run reports the improvement from the start of training: its
    # eval_start is the step-0 evaluation, which is not re-run (or replaced) on resume.
    evals = [r for r in read_rows(out / "metrics.jsonl") if "eval/success" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]
    summary = json.loads((out / "eval.json").read_text())
    reference = json.loads((ref / "eval.json").read_text())
    assert summary["eval_start"] == evals[0]["eval/success"] == reference["eval_start"]
    assert summary["eval_end"] == reference["eval_end"] and summary["steps"] == 4

    got, want = train_rows(out / "metrics.jsonl"), reference_run.train_rows()
    assert sorted(got) == sorted(want) == [1, 2, 3, 4]
    for step in got:
        mismatched = {k: (got[step].get(k), want[step].get(k)) for k in SAME if got[step].get(k) != want[step].get(k)}
        assert not mismatched, f"step {step}: {mismatched}"

    # Each checkpoint also holds the policy as an HF folder with exactly the trained weights.
    from atgrpo.models.folder import load_model

    exported = load_model(out / "checkpoints/step_000004/shared/model").state_dict()
    assert exported.keys() <= mine["model"].keys()
    for name, tensor in exported.items():
        assert torch.equal(tensor, mine["model"][name]), name
