"""Intake checks (`atgrpo.learner.intake`): each bad case a peer can send is refused with its reason
and scope; what real workflows produce passes in every sampling mode; and the learner's last check
(`Orchestrator.plan`) drops a malformed sample with its group instead of raising.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import msgspec
import numpy as np
import pytest

from atgrpo.config import load_config
from atgrpo.engines.base import SamplingParams
from atgrpo.learner.hub import StepData
from atgrpo.learner.intake import LOGPROB_EPS, IntakeLimits, PolicyLimits, UnitIntake, sample_fault, screen
from atgrpo.learner.orchestrator import Orchestrator
from atgrpo.messages import EnvResult, GroupKey, Sample, UnitTimings, WorkUnit
from atgrpo.workflows.base import PolicyHandle
from atgrpo.workflows.games import GameWorkflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflows"))  # the workflow tests' scripted engine
from scripted import ScriptedEngine

VOCAB = 100
K = 2


def limits(**changes: object) -> IntakeLimits:
    base = IntakeLimits(
        roles=("tool", "plan"),
        role_policy={"tool": "shared", "plan": "shared"},
        policies={"shared": PolicyLimits(VOCAB, context_length=64)},
        turns=4,
        k=K,
        tree=True,
        trajectory=False,
        max_new_tokens=8,
        micro_batch_tokens=32,
    )
    return dataclasses.replace(base, **changes)


UNIT = WorkUnit(unit_id=7, step=3, seeds=[10, 11], env_offset=4, split="train", versions={"shared": 0})


def sample(env: int = 4, agent: int = 1, turn: int = 0, branch: int = 0, **changes: object) -> Sample:
    s = Sample(
        "run",
        "shared",
        0,
        3,
        ("tool", "plan")[agent % 2],
        GroupKey(env, agent, turn),
        [1, 2, 3],
        [4, 5],
        [-0.5, -0.25],
        reward=1.0,
        reward_team=1.0,
        reward_local=0.0,
        branch=branch,
    )
    return msgspec.structs.replace(s, **changes)


def group(env: int = 4, agent: int = 1, turn: int = 0) -> list[Sample]:
    return [sample(env, agent, turn, b) for b in range(K)]


def envs(unit: WorkUnit = UNIT, per_env: int = 1) -> list[EnvResult]:
    return [EnvResult(unit.env_offset + e, False, 2, 0.5) for e in range(len(unit.seeds)) for _ in range(per_env)]


# -- one sample ----------------------------------------------------------------------------------


BAD_SAMPLES = {
    "unknown_role": dict(role="critic"),
    "wrong_policy": dict(policy="other"),
    "bad_key": dict(key=GroupKey(4, 0, 0)),  # agent 0 is "tool", the sample is "plan"
    "bad_branch": dict(branch=K),
    "empty_prompt": dict(prompt_ids=[]),
    "empty_response": dict(response_ids=[], logprobs=[]),
    "logprob_count": dict(logprobs=[-0.5]),
    "response_too_long": dict(response_ids=[4] * 9, logprobs=[-0.1] * 9),
    "too_long": dict(prompt_ids=[1] * 60, response_ids=[4] * 5, logprobs=[-0.1] * 5),
    "out_of_vocab": dict(prompt_ids=[1, VOCAB, 3]),
    "nonfinite_logprob": dict(logprobs=[-0.5, math.nan]),
    "positive_logprob": dict(logprobs=[-0.5, 0.5]),
    "nonfinite_reward": dict(reward=math.inf),
}


@pytest.mark.parametrize("reason", sorted(BAD_SAMPLES))
def test_each_bad_sample_is_refused_with_its_reason(reason: str) -> None:
    fault = sample_fault(sample(**BAD_SAMPLES[reason]), limits())
    assert fault is not None and fault.reason == reason and fault.scope == "unit", fault


@pytest.mark.parametrize(
    "changes",
    [
        dict(response_ids=[4, -1]),
        dict(response_ids=[4, VOCAB + 5]),
        dict(prompt_ids=[-3, 1]),
        dict(logprobs=[-math.inf, -0.1]),
        dict(reward_team=math.nan),
        dict(reward_local=-math.inf),
        dict(key=GroupKey(4, 1, 4)),
        dict(key=GroupKey(4, 2, 0)),
        dict(key=GroupKey(4, -1, 0)),
    ],
)
def test_more_values_outside_their_range_are_refused(changes: dict) -> None:
    assert sample_fault(sample(**changes), limits()) is not None


def test_a_well_formed_sample_passes_and_float_rounding_above_zero_is_allowed() -> None:
    assert sample_fault(sample(), limits()) is None
    assert sample_fault(sample(logprobs=[0.0, LOGPROB_EPS]), limits()) is None
    assert sample_fault(sample(prompt_ids=[VOCAB - 1], response_ids=[0], logprobs=[-0.1]), limits()) is None


def test_a_sample_over_the_micro_batch_budget_drops_its_group_not_the_unit() -> None:
    fault = sample_fault(sample(prompt_ids=[1] * 40), limits())  # 42 tokens: within the context, over 32
    assert fault is not None and fault.reason == "over_budget" and fault.scope == "group"


def test_a_response_is_checked_against_its_own_agents_budget() -> None:
    lim = limits(agent_max_new_tokens={"tool": 12, "plan": 8})
    long = dict(response_ids=[4] * 10, logprobs=[-0.1] * 10)
    assert sample_fault(sample(agent=0, **long), lim) is None  # the tool's 12
    assert sample_fault(sample(agent=1, **long), lim).reason == "response_too_long"  # type: ignore[union-attr]
    from_cfg = IntakeLimits.from_config(
        load_config(None, ["rollout.max_new_tokens_per_role={tool=12}"]), {"shared": PolicyLimits(VOCAB)}
    )
    assert from_cfg.agent_max_new_tokens == {"tool": 12, "plan": 32}


def test_trajectory_samples_use_key_env_0_0_and_any_role() -> None:
    lim = limits(tree=False, trajectory=True)
    assert sample_fault(sample(env=4, agent=0, turn=0, role="plan"), lim) is None
    assert sample_fault(sample(env=4, agent=1, turn=0), lim).reason == "bad_key"  # type: ignore[union-attr]


# -- a unit ---------------------------------------------------------------------------------------


def unit_fault(
    batches: list[list[Sample]],
    lim: IntakeLimits | None = None,
    unit: WorkUnit = UNIT,
    env_results: list[EnvResult] | None = None,
) -> str | None:
    """The reason the first unit fault of `batches` (then `finish`) gives, or None."""
    intake = UnitIntake(unit, lim or limits())
    for batch in batches:
        faults = intake.add(batch)
        if faults and faults[-1].scope == "unit":
            return faults[-1].reason
    end = intake.finish(envs(unit) if env_results is None else env_results)
    return end.reason if end is not None else None


def test_a_whole_unit_passes() -> None:
    intake = UnitIntake(UNIT, limits())
    for g in (group(4, 0, 0), group(4, 1, 0), group(5, 0, 0), group(5, 1, 0)):
        assert intake.add(g) == []
    assert intake.finish(envs()) is None and len(intake.samples) == 4 * K


@pytest.mark.parametrize(
    "bad, reason",
    [
        (sample(env=3), "key_outside_unit"),  # below env_offset
        (sample(env=6), "key_outside_unit"),  # env_offset + len(seeds)
        (sample(step=2), "wrong_step"),
        (sample(branch=0, response_ids=[9, 9]), "duplicate_branch"),
    ],
)
def test_samples_that_do_not_belong_to_the_unit_refuse_it(bad: Sample, reason: str) -> None:
    assert unit_fault([[sample(branch=0)], [bad]]) == reason


def test_a_policy_the_unit_does_not_name_refuses_it() -> None:
    lim = limits(
        role_policy={"tool": "shared", "plan": "other"},
        policies={"shared": PolicyLimits(VOCAB), "other": PolicyLimits(VOCAB)},
    )
    assert unit_fault([[sample(policy="other")]], lim) == "wrong_policy"


def test_too_many_samples_in_a_group_refuse_the_unit() -> None:
    assert unit_fault([group(), [sample(branch=1, response_ids=[7, 7])]]) == "group_overfull"


def test_samples_per_unit_are_bounded_by_envs_k_roles_turns() -> None:
    bound = len(UNIT.seeds) * K * 2 * 4
    assert unit_fault([[sample()] * (bound + 1)]) == "too_many_samples"
    # Refused by the ledger or not, what the peer sent counts.
    intake = UnitIntake(UNIT, limits())
    assert intake.add([], received=bound + 1)[-1].reason == "too_many_samples"


def test_an_evaluation_unit_carries_no_samples() -> None:
    greedy = msgspec.structs.replace(UNIT, greedy=True)
    assert unit_fault([[sample()]], unit=greedy) == "greedy_samples"
    assert unit_fault([], unit=greedy) is None


def test_a_tree_group_must_be_whole_when_the_unit_ends() -> None:
    assert unit_fault([group(4, 0, 0), [sample(5, 0, 0, 1)]]) == "group_incomplete"


@pytest.mark.parametrize(
    "rows",
    [
        [EnvResult(4, False, 2, 0.5)],  # env 5 missing
        [EnvResult(4, False, 2, 0.5), EnvResult(5, False, 2, 0.5), EnvResult(5, False, 2, 0.5)],
        [EnvResult(4, False, 2, 0.5), EnvResult(6, False, 2, 0.5)],  # outside the unit
        [EnvResult(4, False, 2, math.nan), EnvResult(5, False, 2, 0.5)],
        [EnvResult(4, False, 5, 0.5), EnvResult(5, False, 2, 0.5)],  # more turns than task.turns
    ],
)
def test_env_results_must_be_one_finite_row_per_env_of_the_unit(rows: list[EnvResult]) -> None:
    assert unit_fault([group()], env_results=rows) == "env_results"


def test_parallel_groups_may_shrink_after_the_first_decision() -> None:
    lim = limits(tree=False)
    later = [sample(4, 1, 2, 0)]  # one episode still running at turn 2
    assert unit_fault([group(4, 0, 0), later], lim, env_results=envs(per_env=K)) is None
    assert unit_fault([[sample(4, 0, 0, 0)]], lim, env_results=envs(per_env=K)) == "group_incomplete"
    assert unit_fault([group(4, 0, 0)], lim) == "env_results"  # parallel: one row per episode


def test_trajectory_groups_hold_whole_consistent_episodes() -> None:
    lim = limits(tree=False, trajectory=True)

    def ep(b, n, r=1.0):
        return [sample(4, 0, 0, b, reward=r, response_ids=[4, i]) for i in range(n)]

    assert unit_fault([ep(0, 3), ep(1, 2)], lim, env_results=envs(per_env=K)) is None
    assert unit_fault([ep(0, 3)], lim, env_results=envs(per_env=K)) == "group_incomplete"  # episode 1 missing
    assert unit_fault([ep(0, 9)], lim) == "group_overfull"  # more than 2 roles x 4 turns
    assert unit_fault([ep(0, 1) + ep(0, 1, r=2.0)], lim) == "reward_mismatch"


def test_an_over_budget_sample_drops_its_whole_group_even_when_staged_earlier() -> None:
    intake = UnitIntake(UNIT, limits())
    assert intake.add([sample(4, 1, 0, 0)]) == [] and intake.staged_last == 1
    faults = intake.add([sample(4, 1, 0, 1, prompt_ids=[1] * 40), *group(5, 1, 0)])
    assert [f.reason for f in faults] == ["over_budget"]
    assert intake.staged_last == K and intake.dropped_samples == 2
    assert {s.key for s in intake.samples} == {GroupKey(5, 1, 0)}
    assert intake.add([sample(4, 1, 0, 1)]) == [] and intake.staged_last == 0  # later members go too
    assert intake.dropped_samples == 3
    assert intake.finish(envs()) is None  # the dropped group is not "incomplete"


@pytest.mark.parametrize("grouping, pooled", [("agent", GroupKey(4, 1, 2)), ("turn", GroupKey(4, 0, 1))])
def test_an_over_budget_sample_drops_its_whole_pooled_group(grouping: str, pooled: GroupKey) -> None:
    # Agent-wise (turn-wise) groups pool the turns (agents) of one agent (turn): the faulty sample at
    # (4, 1, 1) takes the pooled key's K samples with it, and other groups stay.
    lim = limits(grouping=grouping)
    intake = UnitIntake(UNIT, lim)
    assert intake.add([*group(pooled.env, pooled.agent, pooled.turn), *group(5, 1, 1)]) == []
    faults = intake.add([sample(4, 1, 1, 0, prompt_ids=[1] * 40)])
    assert [f.reason for f in faults] == ["over_budget"]
    assert {s.key for s in intake.samples} == {GroupKey(5, 1, 1)} and intake.dropped_samples == K + 1
    assert intake.add([sample(4, 1, 1, 1)]) == [] and intake.staged_last == 0
    assert intake.finish(envs()) is None
    keep, dropped = screen(
        [*group(pooled.env, pooled.agent, pooled.turn), sample(4, 1, 1, 0, prompt_ids=[1] * 40), *group(5, 1, 1)], lim
    )
    assert keep == [K + 1, K + 2] and dropped == {"over_budget": 1, "group_of_dropped": K}


def test_an_over_budget_sample_does_not_hide_a_unit_fault() -> None:
    assert unit_fault([[sample(env=9, prompt_ids=[1] * 40)]]) == "key_outside_unit"


# -- what the workflows really produce passes ----------------------------------------------------


@pytest.mark.parametrize(
    "overrides, greedy",
    [
        ([], False),
        (['rollout.sampling="parallel"'], False),
        (['rollout.sampling="parallel"', 'rollout.grouping="trajectory"'], False),
        (['rollout.grouping="agent"'], False),
        (['rollout.grouping="turn"'], False),
        (['rollout.sampling="parallel"', 'rollout.grouping="agent"'], False),
        ([], True),
    ],
)
def test_real_units_of_every_sampling_mode_pass(overrides: list[str], greedy: bool) -> None:
    cfg = load_config(None, ["task.env={width=6,height=6,obstacle_ratio=0.2,min_distance=3}", *overrides])
    eng = ScriptedEngine(lambda text, i: ["[U]", "[D]", "[L]", "[R]"][i % 4])
    unit = WorkUnit(0, 0, [0, 1, 2], 3, "train", {"shared": 0}, greedy=greedy)
    wf = GameWorkflow(cfg)
    try:
        result = wf.run(
            unit, {"shared": PolicyHandle(eng, eng.tokenizer)}, SamplingParams(max_new_tokens=16), run_id="t"
        )
    finally:
        wf.close()
    intake = UnitIntake(unit, IntakeLimits.from_config(cfg, {"shared": PolicyLimits(len(eng.tokenizer))}))
    assert intake.add(result.samples) == []
    assert intake.finish(result.envs) is None
    assert len(intake.samples) == len(result.samples) and (greedy or result.samples)


# -- the learner's last check --------------------------------------------------------------------


def step_data(samples: list[Sample]) -> StepData:
    return StepData(0, samples, [], UnitTimings(), 0.0, [0] * len(samples))


def orchestrator(lim: IntakeLimits, *sets: str) -> Orchestrator:
    cfg = load_config(None, [f"rollout.k={K}", *sets])
    return Orchestrator(cfg, SimpleNamespace(limits=lim), {"shared": 0}, world=1)  # type: ignore[arg-type]


def test_screen_drops_a_bad_sample_with_its_group() -> None:
    samples = [*group(4, 0, 0), sample(5, 1, 0, 0), sample(5, 1, 0, 1, reward=math.nan)]
    keep, dropped = screen(samples, limits())
    assert keep == [0, 1] and dropped == {"nonfinite_reward": 1, "group_of_dropped": 1}


def test_a_malformed_sample_reaching_plan_is_dropped_and_counted_not_raised() -> None:
    orch = orchestrator(limits())
    bad = sample(5, 1, 0, 1, response_ids=[4, VOCAB + 1])
    data = step_data([*group(4, 1, 0), sample(5, 1, 0, 0), bad])
    plans, objective = orch.plan(data)
    assert [(s.key, s.branch) for s in data.samples] == [(GroupKey(4, 1, 0), 0), (GroupKey(4, 1, 0), 1)]
    assert len(data.staleness) == 2 and objective.advantages.values.shape == (2,)
    trained = [i for st in plans[0].steps["shared"] for mb in st.micro_batches for i in mb.sample_index]
    assert sorted(trained) == [0, 1]
    assert orch.metrics() == {
        "learner/dropped_out_of_vocab": 1.0,
        "learner/dropped_group_of_dropped": 1.0,
        "learner/dropped_total": 2.0,
    }


def test_a_step_the_packer_cannot_take_trains_on_nothing_instead_of_ending_the_run() -> None:
    # The intake was told of a larger budget than the packer has: the sample passes the check, and
    # the packer raises (SampleTooLongError); the step must still go on.
    orch = orchestrator(limits(micro_batch_tokens=1000), "train.micro_batch_tokens=4")
    data = step_data(group(4, 1, 0))
    plans, objective = orch.plan(data)
    assert data.samples == [] and objective.advantages.values.shape == (0,)
    assert all(st.micro_batches == [] for st in plans[0].steps["shared"])
    assert orch.metrics()["learner/dropped_unpackable"] == float(K)


def test_limits_from_a_config() -> None:
    cfg = load_config(
        None,
        [
            'rollout.sampling="parallel"',
            'rollout.grouping="trajectory"',
            "rollout.k=3",
            "task.turns=5",
            "rollout.max_new_tokens=12",
            "train.micro_batch_tokens=99",
        ],
    )
    lim = IntakeLimits.from_config(cfg, {"shared": PolicyLimits(VOCAB)})
    assert (lim.roles, lim.turns, lim.k, lim.tree, lim.trajectory) == (("tool", "plan"), 5, 3, False, True)
    assert lim.grouping == "trajectory"
    assert (lim.max_new_tokens, lim.micro_batch_tokens, lim.samples_per_env) == (12, 99, 3 * 2 * 5)
    assert dict(lim.role_policy) == {"tool": "shared", "plan": "shared"}
    assert np.isfinite(LOGPROB_EPS) and 0 < LOGPROB_EPS < 0.01
