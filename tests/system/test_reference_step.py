"""The in-process reference step (`atgrpo.reference_step`) does what the distributed system does:
from the same initial model, its first steps sample the same responses with the same rewards, compute
the same advantages and make the same update as the learner + actor processes of the reference run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from systest_util import REFERENCE_STEPS, Run, tiny_sets

from atgrpo.config import load_config
from atgrpo.reference_step import open_reference

STEPS = 2
EXACT = ("rollout/samples", "learner/shared/tokens", "learner/shared/version")
"""Counts: equal or the samples differ."""
CLOSE = (
    "rollout/reward_mean",
    "rollout/response_len_mean",
    "rollout/success",
    "advantage/abs_mean",
    "learner/shared/loss",
    "learner/shared/clip_frac",
    "learner/shared/logprob_mismatch",
)
"""Means of the same numbers, summed in the same order by the same code: equal up to float rounding
(the learner's reductions may be split differently between processes)."""


MISMATCH = "learner/shared/logprob_mismatch"
"""Left out of the system's metrics on a step where nothing trained (`learner/lora` issue 39)."""


def test_reference_step_matches_the_system(reference_run: Run) -> None:
    assert REFERENCE_STEPS >= STEPS
    out = reference_run.out_dir
    cfg = load_config(None, tiny_sets(out, run__steps=REFERENCE_STEPS, run__checkpoint_every=2))
    ref = open_reference(cfg)
    ref.rollout_threads = ref.train_threads = 1  # the system tests' processes run on one thread each
    want = reference_run.train_rows()
    try:
        for step in range(STEPS):
            res = ref.step(step)
            got = {
                "rollout/samples": float(len(res.samples)),
                "rollout/reward_mean": float(np.mean([s.reward for s in res.samples])),
                "rollout/response_len_mean": float(np.mean([len(s.response_ids) for s in res.samples])),
                "rollout/success": float(np.mean([e.success for e in res.envs])),
                **res.advantages.metrics(),
                **res.metrics,
            }
            row = want[step + 1]
            for k in EXACT:
                assert got[k] == row[k], (step, k)
            for k in CLOSE:
                if k == MISMATCH and k not in row:  # not measured: nothing trained (every advantage 0)
                    assert row["advantage/abs_mean"] == 0.0, (step, k)
                    continue
                assert got[k] == pytest.approx(row[k], rel=1e-5, abs=1e-7), (step, k)
        weights = ref.backends["shared"].export_weights()
    finally:
        ref.close()
    system = torch.load(out / f"checkpoints/step_{STEPS:06d}/shared/learner.pt", weights_only=True)["model"]
    # The tiny model ties its head to the embedding: published once (issue 38), saved under both names.
    assert set(system) - set(weights) == {"lm_head.weight"} and set(weights) <= set(system)
    assert torch.equal(system["lm_head.weight"], system["model.embed_tokens.weight"])
    lr = cfg.policies["shared"].lr
    for name, tensor in weights.items():
        # After Adam steps: a reduction-order difference moves a weight by far less than one step (lr).
        torch.testing.assert_close(tensor, system[name], atol=1e-2 * lr, rtol=1e-5, msg=name)
