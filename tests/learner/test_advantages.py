"""Grouping strategies (`atgrpo.learner.advantages`): the advantages each gives on small cases
computed by hand, and which configs accept them.

One env, agents 0 and 1, turns 0 and 1, K = 2 (rewards per (agent, turn) group):
  (0, 0): 1, 3    (0, 1): 5, 7    (1, 0): 0, 2    (1, 1): 4, 4
and a second env whose one group (0, 0) is 10, 10 (constant: 0 under every grouping, and never
pooled with the first env). Advantage = (r - mean) / (std + 1e-6), std with ddof = 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from atgrpo.config import load_config
from atgrpo.learner.advantages import GROUPINGS, step_advantages
from atgrpo.messages import GroupKey, Sample

EPS = 1e-6
RTOL = 1e-12
"""float64 arithmetic of a few operations on values below 10: rounding is ~1e-15 relative."""
CASE = [  # (env, agent, turn, branch, reward)
    (0, 0, 0, 0, 1.0),
    (0, 0, 0, 1, 3.0),
    (0, 0, 1, 0, 5.0),
    (0, 0, 1, 1, 7.0),
    (0, 1, 0, 0, 0.0),
    (0, 1, 0, 1, 2.0),
    (0, 1, 1, 0, 4.0),
    (0, 1, 1, 1, 4.0),
    (1, 0, 0, 0, 10.0),
    (1, 0, 0, 1, 10.0),
]


def samples() -> list[Sample]:
    return [
        Sample(
            "run",
            "shared",
            0,
            0,
            ("tool", "plan")[a],
            GroupKey(e, a, t),
            [1],
            [2],
            [-0.1],
            reward=r,
            reward_team=r,
            reward_local=0.0,
            branch=b,
        )
        for e, a, t, b, r in CASE
    ]


def z(r: float, mean: float, sum_sq: float, n: int) -> float:
    return (r - mean) / (math.sqrt(sum_sq / (n - 1)) + EPS)


def test_agent_wise_pools_all_turns_of_one_agent() -> None:
    # agent 0: {1, 3, 5, 7}, mean 4, squares 9+1+1+9 = 20; agent 1: {0, 2, 4, 4}, mean 2.5, squares 11.
    want = [z(r, 4.0, 20.0, 4) for r in (1, 3, 5, 7)] + [z(r, 2.5, 11.0, 4) for r in (0, 2, 4, 4)] + [0.0, 0.0]
    adv = step_advantages(samples(), "agent")
    np.testing.assert_allclose(adv.values, want, rtol=RTOL, atol=0)
    assert adv.num_groups == 3 and adv.stats.size.tolist() == [4, 4, 2]


def test_turn_wise_pools_all_agents_of_one_turn() -> None:
    # turn 0: {1, 3, 0, 2}, mean 1.5, squares 5; turn 1: {5, 7, 4, 4}, mean 5, squares 6.
    want = [z(r, 1.5, 5.0, 4) for r in (1, 3)] + [z(r, 5.0, 6.0, 4) for r in (5, 7)]
    want += [z(r, 1.5, 5.0, 4) for r in (0, 2)] + [z(r, 5.0, 6.0, 4) for r in (4, 4)] + [0.0, 0.0]
    adv = step_advantages(samples(), "turn")
    np.testing.assert_allclose(adv.values, want, rtol=RTOL, atol=0)
    assert adv.num_groups == 3 and adv.stats.size.tolist() == [4, 4, 2]


def test_agent_turn_keeps_each_pair_of_candidates_apart() -> None:
    # Every (agent, turn) pair of env 0 is {x, x + 2} (z = -+1/sqrt 2 scaled) but (1, 1), constant.
    pair = 2.0 / (math.sqrt(2.0) + EPS) / 2.0
    want = [-pair, pair] * 3 + [0.0, 0.0, 0.0, 0.0]
    adv = step_advantages(samples(), "agent_turn")
    np.testing.assert_allclose(adv.values, want, rtol=RTOL, atol=0)
    assert adv.num_groups == 5


def test_the_groupings_differ_on_the_same_samples() -> None:
    # A test that could not tell them apart would pass for a strategy that ignores its key.
    values = {name: step_advantages(samples(), name).values for name in ("agent", "turn", "agent_turn")}
    assert not np.allclose(values["agent"], values["turn"])
    assert not np.allclose(values["agent"], values["agent_turn"])


def test_every_config_grouping_has_a_strategy() -> None:
    from atgrpo.config.sections import RolloutSection

    names = set(RolloutSection.model_fields["grouping"].annotation.__args__)
    assert names == set(GROUPINGS)


@pytest.mark.parametrize("grouping", ["agent", "turn"])
@pytest.mark.parametrize("sampling", ["tree", "parallel"])
def test_agent_and_turn_groupings_take_either_sampling(grouping: str, sampling: str) -> None:
    cfg = load_config(None, [f'rollout.grouping="{grouping}"', f'rollout.sampling="{sampling}"'])
    assert (cfg.rollout.grouping, cfg.rollout.sampling) == (grouping, sampling)


def test_unknown_grouping_is_refused() -> None:
    with pytest.raises(Exception, match="grouping"):
        load_config(None, ['rollout.grouping="env"'])
