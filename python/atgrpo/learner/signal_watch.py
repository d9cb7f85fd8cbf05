"""Whether a step gave a policy anything to learn from, said in the metrics and on the console.

A group whose rewards are all equal (or that holds one sample) gets advantage 0 on every sample
(`kernels`, ALGORITHM.md). When every sample of a policy has advantage 0 and the loss has no term
besides the PPO one (`train.entropy_coef` and `train.kl_coef` 0), its loss and gradient are
exactly 0: nothing trains, and the step measured nothing about how the engine and the learner agree
on tokens that train. So its `learner/<p>/logprob_mismatch` is left out of the step's metrics
(absent, not a number that would read as a measurement), and the console says why. With an
entropy or KL term the tokens do train, and the mismatch is logged as usual.

When every group of a step is constant for `metrics.warn_constant_steps` steps in a row, the run
is learning nothing (an untrained model that never answers in the format, say): one warning says
so, with the reason, once per run.

Only rank 0 uses this (it has the samples and their advantages); nothing here blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from atgrpo.messages import Sample

log = logging.getLogger("atgrpo.learner")

UNMEASURED = ("logprob_mismatch",)
"""Per-policy learner metrics that a step with every advantage 0 does not measure."""


def quiet_policies(samples: Sequence[Sample], advantages: np.ndarray) -> list[str]:
    """The policies (sorted) that have samples in this step, every one with advantage 0."""
    policies = np.asarray([s.policy for s in samples], dtype=object)
    out = []
    for p in sorted(set(policies.tolist())):
        if not np.any(advantages[policies == p]):
            out.append(p)
    return out


class SignalWatch:
    """Rank 0's per-step check: strips the unmeasured metrics and warns of a run that learns nothing."""

    def __init__(
        self,
        warn_after: int,
        notify: Callable[[str, str], None] | None = None,
        *,
        trains_without_advantage: bool = False,
    ) -> None:
        """`notify(level, text)`: how a line reaches the user's console besides the log (the job
        emits it as a `messages.Notice` event). `trains_without_advantage`: the loss has an entropy
        or KL term, so a step with every advantage 0 still trains (its metrics are kept)."""
        self.warn_after = warn_after
        self.trains_without_advantage = trains_without_advantage
        self.notify = notify
        self.constant_run = 0
        """Steps in a row, up to the last one, whose groups were all constant."""
        self.warned = False
        self._quiet: set[str] = set()

    def observe(
        self,
        step: int,
        samples: Sequence[Sample],
        advantages: np.ndarray,
        metrics: dict,
    ) -> None:
        """Apply step `step`'s verdict to its `metrics` (in place) and log what it means."""
        quiet = [] if self.trains_without_advantage else quiet_policies(samples, advantages)
        for p in quiet:
            for name in UNMEASURED:
                metrics.pop(f"learner/{p}/{name}", None)
            if p not in self._quiet:  # said once when a quiet stretch starts, not every step
                self._say(
                    "info",
                    f"step {step}: policy {p}: every advantage is 0 (all its groups constant), so nothing "
                    f"trained it and learner/{p}/logprob_mismatch is not measured (left out of the metrics) until "
                    "one of its groups differs",
                )
        self._quiet = set(quiet)
        everything_constant = len(samples) > 0 and not np.any(advantages)
        self.constant_run = self.constant_run + 1 if everything_constant else 0
        if self.warn_after and not self.warned and self.constant_run >= self.warn_after:
            self.warned = True
            self._say(
                "warning",
                f"the run is learning nothing: every group of the last {self.constant_run} steps (to step {step}) was "
                "constant (all K rewards equal), so every advantage was 0 and no policy got a policy-gradient signal. Typical cause: "
                "the model never answers in the required format, so every answer gets the same penalty; warm-start it "
                "(warmstart.steps > 0, with warmstart.pretrained = true for a path model or an adapter on one) or raise "
                "rollout.temperature or rollout.k",
            )

    def _say(self, level: str, text: str) -> None:
        log.log(logging.WARNING if level == "warning" else logging.INFO, "%s", text)
        if self.notify is not None:
            self.notify(level, text)


__all__ = ["UNMEASURED", "SignalWatch", "quiet_policies"]
