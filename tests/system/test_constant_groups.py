"""A run whose rewards are all alike, through `atgrpo-train`: the tiny untrained model answering with
one token (never a valid answer, so every candidate gets the same penalty and every group is
constant). Its metrics carry no `logprob_mismatch` (not measured: nothing trained), and the console
warns once, with the reason, that the run is learning nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from systest_util import run_train, tiny_sets

pytestmark = pytest.mark.integration


def test_constant_rewards_log_no_mismatch_and_warn_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    sets = tiny_sets(
        out,
        run__steps=3,
        run__eval_seeds=2,
        warmstart__steps=0,
        rollout__max_new_tokens=1,
        rollout__envs_per_step=2,
        metrics__warn_constant_steps=2,
        run__checkpoint_every=0,
    )
    run = run_train(out, sets)
    assert run.returncode == 0, run.output[-4000:]
    rows = run.train_rows()
    assert sorted(rows) == [1, 2, 3]
    for step, row in rows.items():
        assert row["advantage/zero_frac"] == 1.0 and row["advantage/abs_mean"] == 0.0, (
            step,
            row,
        )  # forced constant
        assert "learner/shared/logprob_mismatch" not in row, (
            step,
            row,
        )  # not measured, not 0.0
        assert row["learner/shared/loss"] == 0.0 and "learner/shared/tokens" in row
    assert run.output.count("warning: the run is learning nothing") == 1, run.output[-4000:]
    assert "every group of the last 2 steps (to step 2) was constant" in run.output
    assert "learner/shared/logprob_mismatch is not measured" in run.output
