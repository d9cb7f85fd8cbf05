"""GRPO advantages of a step's samples, one strategy per grouping (ALGORITHM.md, "Advantages").

A grouping says which samples are compared with each other; the Rust kernel
(`atgrpo.kernels.compute_advantages`) does the arithmetic: per group, (reward - mean) / (std + eps),
or reward - mean without the std division (`scale_by_std` False, Dr. GRPO), with singleton and
constant groups getting 0. A reward shaping term ([N], e.g. the overlong penalty,
`learner.objective`) is added to the samples' rewards first; the samples are never changed.

- `AgentTurnGrouping` (AT-GRPO): one group per (env, agent, turn), the K candidates of a tree node.
- `TrajectoryGrouping` (the ablation): one group per env over its K whole episodes. Every sample of an
  episode carries the episode's return; each episode counts once in the group's baseline, and all of
  its samples get its advantage.
- `AgentGrouping` (the agent-wise ablation): one group per (env, agent), every candidate of one agent
  over all turns of its env; rewards are the per-step ones, as in agent_turn.
- `TurnGrouping` (the turn-wise ablation): one group per (env, turn), every agent's candidates at one
  turn of its env.

agent, turn and agent_turn keep the samples' keys (env, agent, turn) and only choose which parts of
the key the kernel groups by (the others are passed as 0), so the intake's per-key checks (K
branches per key in tree sampling) hold for all three.

Advantages depend only on a group's own samples, never on the rest of the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from atgrpo import kernels
from atgrpo.messages import GroupKey, Sample


@dataclass(frozen=True)
class Advantages:
    values: np.ndarray
    """[N] float64, one per sample, in the order the samples were given."""
    stats: kernels.GroupStats
    num_groups: int
    group_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """[N] int64, each sample's group (an index into `stats`' per-group arrays)."""

    def constant_samples(self) -> np.ndarray:
        """[N] bool: the samples of constant groups (two or more finite rewards, all equal), whose
        advantages are all 0 by the kernel's rule: they carry no gradient."""
        if not self.values.size:
            return np.zeros(0, dtype=bool)
        constant = (self.stats.size >= 2) & (self.stats.std == 0)
        return constant[self.group_ids]

    @property
    def informative_groups(self) -> int:
        """Groups whose advantages are not all 0: two or more finite rewards, not all equal."""
        st = self.stats
        return self.num_groups - st.num_singleton - st.num_constant - st.num_empty

    def metrics(self) -> dict[str, float]:
        """`advantage/*` metrics of a step."""
        adv, stats = self.values, self.stats
        return {
            "advantage/mean": float(adv.mean()) if adv.size else 0.0,
            "advantage/abs_mean": float(np.abs(adv).mean()) if adv.size else 0.0,
            "advantage/zero_frac": float((adv == 0).mean()) if adv.size else 0.0,
            "advantage/group_std_mean": float(np.nanmean(stats.std)) if stats.std.size else 0.0,
            "advantage/group_size_mean": float(stats.size.mean()) if stats.size.size else 0.0,
            "advantage/singleton_groups": float(stats.num_singleton),
            "advantage/constant_groups": float(stats.num_constant),
            "advantage/empty_groups": float(stats.num_empty),
            "advantage/nonfinite_rewards": float(stats.num_nonfinite),
        }


def _empty() -> Advantages:
    zero = np.zeros(0)
    return Advantages(zero, kernels.GroupStats(zero, zero, zero.astype(np.int64), 0, 0, 0, 0), 0)


def _rewards(samples: Sequence[Sample], shaping: np.ndarray | None) -> np.ndarray:
    rewards = np.fromiter((s.reward for s in samples), np.float64, len(samples))
    return rewards if shaping is None else rewards + shaping


def _column(samples: Sequence[Sample], get) -> np.ndarray:
    return np.fromiter((get(s) for s in samples), np.int64, len(samples))


class Grouping(Protocol):
    name: str

    def advantages(
        self, samples: Sequence[Sample], *, scale_by_std: bool = True, shaping: np.ndarray | None = None
    ) -> Advantages:
        """The samples' advantages; `shaping` [N]: added to their rewards first (None: nothing)."""
        ...

    def group_of(self, key: GroupKey) -> GroupKey:
        """The advantage group a sample of key `key` belongs to (the intake drops whole ones)."""
        ...


class _KeyGrouping:
    """Groups by a part of the key (env, agent, turn): env always, agent and turn when named."""

    name = ""
    by_agent = True
    by_turn = True

    def advantages(
        self, samples: Sequence[Sample], *, scale_by_std: bool = True, shaping: np.ndarray | None = None
    ) -> Advantages:
        if not samples:
            return _empty()
        rewards = _rewards(samples, shaping)
        zeros = np.zeros(len(samples), dtype=np.int64)
        agent = _column(samples, lambda s: s.key.agent) if self.by_agent else zeros
        turn = _column(samples, lambda s: s.key.turn) if self.by_turn else zeros
        env = _column(samples, lambda s: s.key.env)
        out = kernels.compute_advantages(env, agent, turn, rewards, scale_by_std=scale_by_std)
        return Advantages(out.advantages, out.stats, out.num_groups, out.group_ids)

    def group_of(self, key: GroupKey) -> GroupKey:
        return GroupKey(key.env, key.agent if self.by_agent else 0, key.turn if self.by_turn else 0)


class AgentTurnGrouping(_KeyGrouping):
    name = "agent_turn"


class AgentGrouping(_KeyGrouping):
    name = "agent"
    by_turn = False


class TurnGrouping(_KeyGrouping):
    name = "turn"
    by_agent = False


class TrajectoryGrouping:
    name = "trajectory"

    def advantages(
        self, samples: Sequence[Sample], *, scale_by_std: bool = True, shaping: np.ndarray | None = None
    ) -> Advantages:
        if not samples:
            return _empty()
        rewards = _rewards(samples, None)
        # One row per (env, branch): an episode's samples share its return and count once in the baseline.
        episodes = np.stack([_column(samples, lambda s: s.key.env), _column(samples, lambda s: s.branch)], axis=1)
        uniq, first, inverse = np.unique(episodes, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        returns = rewards[first]
        if shaping is not None:  # every sample's shaping counts in its episode's return
            returns = returns + np.bincount(inverse, weights=shaping, minlength=len(uniq))
        zeros = np.zeros(len(uniq), dtype=np.int64)
        out = kernels.compute_advantages(uniq[:, 0], zeros, zeros, returns, scale_by_std=scale_by_std)
        return Advantages(out.advantages[inverse], out.stats, out.num_groups, out.group_ids[inverse])

    def group_of(self, key: GroupKey) -> GroupKey:
        return GroupKey(key.env, 0, 0)


GROUPINGS: dict[str, Grouping] = {
    g.name: g for g in (AgentTurnGrouping(), AgentGrouping(), TurnGrouping(), TrajectoryGrouping())
}


def grouping(name: str) -> Grouping:
    """The grouping strategy `rollout.grouping` names."""
    try:
        return GROUPINGS[name]
    except KeyError:
        raise ValueError(f"unknown grouping {name!r}; expected one of {sorted(GROUPINGS)}") from None


def step_advantages(
    samples: Sequence[Sample], grouping_name: str, *, scale_by_std: bool = True, shaping: np.ndarray | None = None
) -> Advantages:
    """Advantages of a step's samples under `rollout.grouping` (`Grouping.advantages`)."""
    return grouping(grouping_name).advantages(samples, scale_by_std=scale_by_std, shaping=shaping)


__all__ = [
    "Advantages",
    "AgentGrouping",
    "AgentTurnGrouping",
    "TurnGrouping",
    "Grouping",
    "TrajectoryGrouping",
    "grouping",
    "step_advantages",
]
