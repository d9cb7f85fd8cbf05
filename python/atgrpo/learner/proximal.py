"""One policy's optimizer steps of a training step, with the proximal policy of a pipelined step.

With `train.max_staleness >= 1` a step's samples come from several behaviour policies, up to k
versions old, and the loss clips against one proximal policy instead (AReaL's decoupled PPO,
`learner.loss`): the learner as it was before the step's first update. The first mini-batch is
trained on exactly that policy, so its proximal policy is the learner itself (stopgrad(logp), no
extra pass). Mini-batches 2..n are scored once with no gradient before the first update
(`LearnerBackend.score`) and keep those log-probs through the step's later updates.

Cost: that forward pass over (n - 1)/n of the step, reported as `proximal_s` (seconds, the device
synchronised), with `proximal_pass` 1 when it ran and 0 when it was skipped (one mini-batch: then
the update is the one without a proximal policy, to float rounding). In strict on-policy mode the
behaviour policy is the step's start policy already, so neither metric is reported.

Every rank calls `train_policy_step` with its own share of the same number of optimizer steps (the
backends' collectives need it); the scores stay on the rank's device, never on the wire.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from atgrpo.learner.backends.base import LearnerBackend
from atgrpo.learner.packing import OptimizerStep


def proximal_logprobs(backend: LearnerBackend, steps: Sequence[OptimizerStep]) -> list[list[torch.Tensor] | None]:
    """Per optimizer step, the proximal policy's log-probs of its micro-batches (None for the
    first: the learner itself when it trains on it). Call before the first update."""
    return [None, *(backend.score(st.micro_batches) for st in steps[1:])]


def train_policy_step(backend: LearnerBackend, steps: Sequence[OptimizerStep], *, decoupled: bool) -> dict[str, float]:
    """Every optimizer step of `steps`, in order; the last one's metrics, and with `decoupled`
    (stale samples admitted) `proximal_pass` and `proximal_s`."""
    proximal: list[list[torch.Tensor] | None] = [None] * len(steps)
    extra: dict[str, float] = {}
    if decoupled:
        t0 = time.perf_counter()
        if len(steps) > 1:
            proximal = proximal_logprobs(backend, steps)
            device = next(backend.model.parameters()).device
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the pass's time, not its launch's
        extra = {"proximal_pass": float(len(steps) > 1), "proximal_s": time.perf_counter() - t0}
    metrics: dict[str, float] = {}
    for st, prox in zip(steps, proximal):
        metrics = backend.train_step(st.micro_batches, st.total_tokens, prox)
    return {**metrics, **extra}


__all__ = ["proximal_logprobs", "train_policy_step"]
