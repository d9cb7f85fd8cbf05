"""What a step trains on, from its samples: shaped rewards, advantages, and the groups that count.

Three `[rollout]` settings act here, in this order; the orchestrator (learner rank 0) and the
in-process reference step both call `step_objective`, so they agree by construction:

1. `overlong_buffer`: DAPO's soft overlong penalty (`overlong_penalties`) is added to each sample's
   reward before its group is compared. Each sample's budget is its agent's (`config.budgets`).
2. `scale_advantages_by_std`: GRPO's (r - mean) / (std + eps), or Dr. GRPO's r - mean (the kernel).
3. `drop_constant_groups`: the samples of constant groups (`Advantages.constant_samples`) leave
   the step: they are not packed, so they are in neither the loss nor its normaliser.

The samples themselves are never changed: `rollout/*` metrics stay those of the task's rewards.
Everything is per sample or per group, and a group lies inside one env, so a streamed part of a
step gets the same objective as the whole step would give it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from atgrpo.config import RunConfig
from atgrpo.learner.advantages import Advantages, step_advantages
from atgrpo.messages import Sample


def overlong_penalties(lengths: np.ndarray, budgets: np.ndarray, buffer: int, penalty: float) -> np.ndarray:
    """[N] float64 reward terms <= 0 for responses of `lengths` tokens under `budgets` (both [N]):
    0 up to `budget - buffer` tokens, then falling linearly by `penalty / buffer` a token, to
    `-penalty` at the budget (DAPO's soft overlong punishment). All 0 when `buffer` is 0."""
    if buffer <= 0:
        return np.zeros(len(lengths))
    over = np.clip(np.asarray(lengths, np.int64) - (np.asarray(budgets, np.int64) - buffer), 0, buffer)
    return -penalty * over / buffer


@dataclass(frozen=True)
class StepObjective:
    advantages: Advantages
    """Of every sample of the step, shaped rewards and all."""
    keep: np.ndarray
    """[N] bool: the samples that train (all of them unless `drop_constant_groups`)."""
    shaping: np.ndarray
    """[N] float64: the overlong penalty added to each sample's reward (0 when off)."""

    def trained(self, samples: Sequence[Sample]) -> tuple[list[Sample], np.ndarray]:
        """The samples that train and their advantages ([n] each), in step order."""
        idx = np.flatnonzero(self.keep)
        return [samples[i] for i in idx], self.advantages.values[idx]

    @property
    def dropped_groups(self) -> int:
        return int(self.advantages.stats.num_constant) if not self.keep.all() else 0

    def metrics(self) -> dict[str, float]:
        """`advantage/*` (of every sample), the groups and samples dropped, the overlong penalty."""
        out = self.advantages.metrics()
        out["advantage/informative_groups"] = float(self.advantages.informative_groups)
        out["advantage/dropped_groups"] = float(self.dropped_groups)
        out["advantage/dropped_samples"] = float((~self.keep).sum())
        if self.shaping.size:
            out["rollout/overlong_penalty_mean"] = float(self.shaping.mean())
            out["rollout/overlong_frac"] = float((self.shaping < 0).mean())
        return out


def step_objective(samples: Sequence[Sample], cfg: RunConfig) -> StepObjective:
    """The shaped advantages of a step's (or a streamed part's) samples and which of them train."""
    ro = cfg.rollout
    shaping = np.zeros(len(samples))
    if ro.overlong_buffer and samples:
        budget_of = cfg.agent_max_new_tokens()
        lengths = np.fromiter((len(s.response_ids) for s in samples), np.int64, len(samples))
        budgets = np.fromiter((budget_of.get(s.role, ro.max_new_tokens) for s in samples), np.int64, len(samples))
        shaping = overlong_penalties(lengths, budgets, ro.overlong_buffer, ro.overlong_penalty)
    adv = step_advantages(
        samples,
        ro.grouping,
        scale_by_std=ro.scale_advantages_by_std,
        shaping=shaping if ro.overlong_buffer else None,
    )
    keep = ~adv.constant_samples() if ro.drop_constant_groups else np.ones(len(samples), dtype=bool)
    return StepObjective(adv, keep, shaping)


__all__ = ["StepObjective", "overlong_penalties", "step_objective"]
