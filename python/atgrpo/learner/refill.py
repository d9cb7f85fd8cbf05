"""Dynamic sampling's refill: more envs for a step whose informative groups fall short (DAPO).

With `rollout.drop_constant_groups` a step may keep few groups (an untrained model's are all
constant). With `rollout.refill_groups = G` the orchestrator then rolls out further envs for the
same step until it holds G informative groups or `rollout.refill_max_envs` extra envs were spent.

Invariants:
* Same policy versions: a refill round is opened while the step is still being collected, before
  its update, so no version is published in between; its units name the versions current at
  lease time like any other, and the ledger admits their samples by the usual rule.
* Disjoint, deterministic envs: refill j of step s rolls seed `units.refill_seeds(s, j, ...)`, a
  range no step and no warm-start demo uses, numbered after the step's own envs
  (`first_env = envs_per_step + j`), so group keys never collide and `unit_seed` differs.
* Accounted: the hub counts every refill unit and env it opens (`hub/refill_units`,
  `hub/refill_envs`); each step reports `rollout/refill_envs`, `rollout/refill_rounds` and
  `rollout/refill_short` (1 when the cap stopped the step short of G).
* Bounded: at most `refill_max_envs` extra envs a step (the config refuses a refill without it).

The size of each refill round comes from the rate of informative groups per env seen so far in the
step; with none seen yet, as many envs as the step has had (capped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from atgrpo.config import RunConfig


@dataclass
class Refill:
    """One step's refill account, kept by the orchestrator while the step is collected."""

    target: int
    """Informative groups the step should hold (`rollout.refill_groups`; 0: no refill)."""
    cap: int
    """Most extra envs (`rollout.refill_max_envs`)."""
    envs: int
    """Envs of the step so far, its own and refills."""
    informative: int = 0
    """Informative groups of the step so far."""
    spent: int = 0
    """Extra envs opened so far."""
    rounds: int = 0

    @classmethod
    def of(cls, cfg: RunConfig) -> Refill:
        ro = cfg.rollout
        return cls(ro.refill_groups, ro.refill_max_envs or 0, ro.envs_per_step)

    def next_envs(self) -> int:
        """How many envs the next refill round rolls out; 0: none (enough groups, or the cap spent)."""
        if self.informative >= self.target or self.spent >= self.cap:
            return 0
        need = self.target - self.informative
        n = math.ceil(need * self.envs / self.informative) if self.informative else self.envs
        return max(1, min(n, self.cap - self.spent))

    def opened(self, envs: int) -> None:
        self.spent += envs
        self.envs += envs
        self.rounds += 1

    def metrics(self) -> dict[str, float]:
        if not self.target:
            return {}
        return {
            "rollout/refill_envs": float(self.spent),
            "rollout/refill_rounds": float(self.rounds),
            "rollout/refill_short": float(self.informative < self.target),
            "rollout/informative_groups": float(self.informative),
        }


__all__ = ["Refill"]
