"""`learner.objective` and `learner.refill` against values worked out by hand: the overlong penalty,
Dr. GRPO's centred advantages, constant groups leaving the loss and its normaliser, and the size
of a refill round. Advantages are float64 sums of a few terms: rtol 1e-12."""

from __future__ import annotations

import numpy as np
import pytest

from atgrpo.config import load_config
from atgrpo.learner.advantages import step_advantages
from atgrpo.learner.objective import overlong_penalties, step_objective
from atgrpo.learner.packing import plan_step
from atgrpo.learner.refill import Refill
from atgrpo.messages import GroupKey, Sample


def sample(env: int, branch: int, reward: float, length: int = 2, role: str = "plan") -> Sample:
    return Sample(
        "r", "shared", 0, 0, role, GroupKey(env, 1, 0), [1, 2], [3] * length, [-0.5] * length, reward, 0.0, reward,
        branch=branch,
    )  # fmt: skip


def config(*overrides: str):
    return load_config(None, ["rollout.k=2", "rollout.max_new_tokens=10", *overrides])


def test_overlong_penalty_is_linear_over_the_buffer():
    # budget 10, buffer 4: free up to 6 tokens, then -1/4 a token, -1 at the budget
    got = overlong_penalties(np.array([5, 6, 7, 8, 10]), np.array([10] * 5), buffer=4, penalty=1.0)
    np.testing.assert_allclose(got, [0.0, 0.0, -0.25, -0.5, -1.0], rtol=1e-12)
    np.testing.assert_array_equal(overlong_penalties(np.array([10]), np.array([10]), buffer=0, penalty=1.0), [0.0])


def test_overlong_penalty_shapes_the_rewards_before_advantages():
    # one group: rewards 1, 1 of lengths 10 (penalty -1) and 6 (none): shaped 0 and 1
    samples = [sample(0, 0, 1.0, length=10), sample(0, 1, 1.0, length=6)]
    obj = step_objective(samples, config("rollout.overlong_buffer=4"))
    np.testing.assert_allclose(obj.shaping, [-1.0, 0.0], rtol=1e-12)
    want = step_advantages(samples, "agent_turn", shaping=np.array([-1.0, 0.0])).values
    np.testing.assert_array_equal(obj.advantages.values, want)
    assert obj.advantages.values[0] < 0 < obj.advantages.values[1]  # equal rewards, the long one loses
    assert samples[0].reward == 1.0  # the sample itself is untouched
    m = obj.metrics()
    assert m["rollout/overlong_frac"] == 0.5 and m["rollout/overlong_penalty_mean"] == -0.5


def test_overlong_penalty_counts_from_each_agents_own_budget():
    cfg = config("rollout.overlong_buffer=2", "rollout.max_new_tokens_per_role={tool = 20}")
    samples = [sample(0, 0, 0.0, length=10, role="plan"), sample(1, 0, 0.0, length=10, role="tool")]
    np.testing.assert_allclose(step_objective(samples, cfg).shaping, [-1.0, 0.0], rtol=1e-12)


def test_without_std_scaling_advantages_are_reward_minus_mean():
    samples = [sample(0, 0, 0.0), sample(0, 1, 0.5)]
    obj = step_objective(samples, config("rollout.scale_advantages_by_std=false"))
    np.testing.assert_allclose(obj.advantages.values, [-0.25, 0.25], rtol=1e-12)
    scaled = step_objective(samples, config()).advantages.values  # std 0.35355339: +-0.70710478
    np.testing.assert_allclose(scaled, [-0.25 / (0.5**0.5 / 2 + 1e-6), 0.25 / (0.5**0.5 / 2 + 1e-6)], rtol=1e-12)


def test_trajectory_shaping_sums_over_the_episode():
    cfg = config('rollout.sampling="parallel"', 'rollout.grouping="trajectory"', "rollout.overlong_buffer=4")
    # env 0: episode 0 (return 1, two samples of 10 tokens: 1 - 2 = -1), episode 1 (return 1, one
    # short sample: 1); mean 0, std sqrt(2) (ddof 1): -1 / (sqrt 2 + 1e-6) for episode 0's samples
    samples = [sample(0, 0, 1.0, length=10), sample(0, 0, 1.0, length=10), sample(0, 1, 1.0, length=3)]
    obj = step_objective(samples, cfg)
    a = 1.0 / (2**0.5 + 1e-6)
    np.testing.assert_allclose(obj.advantages.values, [-a, -a, a], rtol=1e-12)


def test_constant_groups_leave_the_loss_and_its_normaliser():
    # group env 0: rewards 0, 1 (informative); env 1: 1, 1 (constant); env 2: one sample (singleton)
    samples = [sample(0, 0, 0.0), sample(0, 1, 1.0), sample(1, 0, 1.0), sample(1, 1, 1.0, length=5), sample(2, 0, 0.0)]
    off = step_objective(samples, config())
    assert off.keep.all() and off.metrics()["advantage/dropped_groups"] == 0.0
    obj = step_objective(samples, config("rollout.drop_constant_groups=true"))
    np.testing.assert_array_equal(obj.keep, [True, True, False, False, True])
    trained, adv = obj.trained(samples)
    assert [s.key.env for s in trained] == [0, 0, 2]
    np.testing.assert_array_equal(adv, off.advantages.values[[0, 1, 4]])
    m = obj.metrics()
    assert (m["advantage/dropped_groups"], m["advantage/dropped_samples"], m["advantage/informative_groups"]) == (
        1.0,
        2.0,
        1.0,
    )
    (plan,) = plan_step(
        trained, adv, policies=["shared"], pad_ids={"shared": 0}, world=1, minibatches=1, max_tokens=64,
        aggregation="token_mean", share_prefix=False,
    )  # fmt: skip
    # 3 samples of 2 tokens: the constant group's 2 + 5 tokens are not in the normaliser
    assert plan.steps["shared"][0].total_tokens == 6
    assert sorted(i for mb in plan.steps["shared"][0].micro_batches for i in mb.sample_index) == [0, 1, 2]


def test_with_the_new_settings_off_the_advantages_are_those_of_before():
    samples = [sample(0, 0, 0.0, length=10), sample(0, 1, 1.0), sample(1, 0, 1.0), sample(1, 1, 1.0)]
    obj = step_objective(samples, config())
    np.testing.assert_array_equal(obj.advantages.values, step_advantages(samples, "agent_turn").values)
    assert obj.keep.all() and not obj.shaping.any()


@pytest.mark.parametrize(
    ("informative", "envs", "spent", "want"),
    [
        (8, 8, 0, 0),  # enough already
        (4, 8, 0, 4),  # 4 more wanted at 0.5 an env: 8 envs, capped at 4
        (0, 8, 0, 4),  # none seen: as many as the step had, capped
        (2, 8, 3, 1),  # one env left under the cap
        (2, 8, 4, 0),  # the cap is spent
    ],
)
def test_refill_round_size(informative: int, envs: int, spent: int, want: int):
    # target 8 informative groups, cap 4 extra envs
    refill = Refill(target=8, cap=4, envs=envs, informative=informative, spent=spent)
    assert refill.next_envs() == want


def test_refill_round_size_follows_the_rate_of_informative_groups():
    # 3 informative groups in 6 envs (0.5 an env), 8 wanted: ceil(5 / 0.5) = 10 envs, cap 20
    assert Refill(target=8, cap=20, envs=6, informative=3).next_envs() == 10
