"""The games workflow against python/atgrpo/ALGORITHM.md, with scripted engines. Each rule test names its rule."""

from __future__ import annotations

import numpy as np
import pytest
from scripted import ScriptedEngine, grouped_advantages

from atgrpo.config import load_config
from atgrpo.engines.base import SamplingParams
from atgrpo.envs import EnvPool
from atgrpo.messages import WorkUnit
from atgrpo.workflows.base import PolicyHandle
from atgrpo.workflows.games import GameWorkflow

ENV = "task.env={width=6,height=6,obstacle_ratio=0.2,min_distance=3}"
BRANCH_ANSWERS = ["[U]", "[D]", "[L]", "[R]"]
PARSE_PENALTY = -0.5
"""The env's default `parse_penalty` (envs/planpath/README.md)."""


def workflow(*overrides: str) -> GameWorkflow:
    return GameWorkflow(load_config(None, [ENV, *overrides]))


def run(wf: GameWorkflow, answer, seeds=(0, 1, 2), offset=0, greedy=False):
    eng = ScriptedEngine(answer)
    unit = WorkUnit(0, 0, list(seeds), offset, "train", {"shared": 0}, greedy=greedy)
    result = wf.run(unit, {"shared": PolicyHandle(eng, eng.tokenizer)}, SamplingParams(max_new_tokens=16), run_id="t")
    return result, eng


def per_branch(text: str, i: int) -> str:
    return BRANCH_ANSWERS[i % 4]


def obs_of(prompt: str) -> str:
    return "\n".join(prompt.splitlines()[:6])


def test_carry_the_branch_chosen_branch_state_is_carried_forward():
    """The state the next turn sees is the state the chosen candidate produced (not a stale copy)."""
    wf = workflow('task.roles=["plan"]')
    result, eng = run(wf, per_branch, seeds=(5,))
    first = [s for s in result.samples if s.key.turn == 0]
    best = int(np.argmax([s.reward for s in first]))
    replay = EnvPool("planpath", 1, **wf.env_config)
    replay.reset([0], [5], "train")
    expected = replay.step([0], [BRANCH_ANSWERS[best]])
    if len(eng.calls) > 1:  # the episode went on: turn 1's prompts show the chosen branch's state
        assert {obs_of(p) for p in eng.calls[1][0]} == {expected.obs[0]}
    assert first[best].reward == pytest.approx(float(expected.reward[0]))
    assert first[best].success == bool(expected.success[0])


def test_carry_the_branch_rewards_and_done_come_from_the_stepped_branches():
    wf = workflow('task.roles=["plan"]')
    result, _ = run(wf, per_branch, seeds=(7,))
    replay = EnvPool("planpath", 4, **wf.env_config)
    replay.reset(np.arange(4), [7] * 4, "train")
    res = replay.step(np.arange(4), BRANCH_ANSWERS)
    first = sorted((s for s in result.samples if s.key.turn == 0), key=lambda s: s.branch)
    assert [s.reward for s in first] == pytest.approx(list(res.reward))


def test_per_environment_groups_group_key_uses_the_envs_own_index():
    wf = workflow()
    result, _ = run(wf, per_branch, seeds=(0, 1, 2, 3), offset=8)
    envs = {s.key.env for s in result.samples}
    assert envs == {8, 9, 10, 11}
    _, stats, groups = grouped_advantages(result.samples, "agent_turn")
    assert set(stats.size.tolist()) == {4}  # every group is one env's K branches, never two envs
    keys = {(s.key.env, s.key.agent, s.key.turn) for s in result.samples}
    assert groups == len(keys)


def test_later_agents_see_the_chosen_action_plan_agent_sees_the_chosen_tool_answer_and_its_candidates_differ():
    def answer(text: str, i: int) -> str:
        if text.endswith("T:"):  # tool prompt
            return ["[U,U]", "[D,D]", "[L,L]", "[R,R]"][i % 4]
        return BRANCH_ANSWERS[i % 4]

    wf = workflow()
    result, eng = run(wf, answer, seeds=(3,))
    tool = sorted((s for s in result.samples if s.role == "tool" and s.key.turn == 0), key=lambda s: s.branch)
    best_tool = ["[U,U]", "[D,D]", "[L,L]", "[R,R]"][int(np.argmax([s.reward for s in tool]))]
    plan_prompts = eng.calls[1][0]
    assert all(f"T{best_tool}=" in p for p in plan_prompts)  # generated after the choice, and shows it
    plan = [s for s in result.samples if s.role == "plan" and s.key.turn == 0]
    assert len({s.reward for s in plan}) > 1
    assert all(s.key.agent == 1 for s in plan) and all(s.key.agent == 0 for s in tool)


def test_truncation_is_failure_turn_limit_is_a_failure():
    wf = workflow('task.roles=["plan"]', "task.turns=2")
    result, eng = run(wf, lambda t, i: "[U]" if i % 2 else "[D]", seeds=(0, 1))
    assert not any(e.success for e in result.envs)
    assert all(e.turns <= 2 for e in result.envs)
    assert len(eng.calls) <= 2


def test_explicit_alpha_alpha_scales_the_team_reward():
    for alpha in (0.0, 1.0, 2.5):
        wf = workflow('task.roles=["plan"]', f"task.env={{width=6,height=6,min_distance=3,alpha={alpha}}}")
        result, _ = run(wf, lambda t, i: "[U,U,L,L,D,D,R,R,U,U,U,L,L,L,D,D,D,D,R,R]", seeds=range(6))
        for s in result.samples:
            assert s.reward == pytest.approx(alpha * s.reward_team + s.reward_local)


def test_defined_small_groups_singleton_groups_get_zero_advantage():
    wf = workflow('task.roles=["plan"]', "rollout.k=1")
    result, _ = run(wf, per_branch, seeds=(0, 1))
    adv, stats, _ = grouped_advantages(result.samples, "agent_turn")
    assert np.all(adv == 0) and stats.num_singleton == len({(s.key.env, s.key.turn) for s in result.samples})


def test_parallel_sampling_keeps_branches_independent():
    wf = workflow('task.roles=["plan"]', 'rollout.sampling="parallel"')
    result, eng = run(wf, per_branch, seeds=(4,))
    if len(eng.calls) > 1:
        assert len({obs_of(p) for p in eng.calls[1][0]}) > 1  # branches moved differently and stay apart
    assert len(result.envs) == 4  # one result per episode


def test_trajectory_grouping_uses_episode_returns_once_per_branch():
    wf = workflow('rollout.sampling="parallel"', 'rollout.grouping="trajectory"')
    result, _ = run(wf, per_branch, seeds=(0, 1))
    returns = {(e.env, i % 4): e.episode_return for i, e in enumerate(result.envs)}
    for s in result.samples:
        assert (s.key.agent, s.key.turn) == (0, 0)
        assert s.reward == returns[(s.key.env, s.branch)]
    adv, stats, groups = grouped_advantages(result.samples, "trajectory")
    assert groups == 2 and set(stats.size.tolist()) == {4}  # K episodes per env, each counted once
    for s, a in zip(result.samples, adv):
        env_returns = [r for (e, _), r in returns.items() if e == s.key.env]
        ref = (s.reward - np.mean(env_returns)) / (np.std(env_returns, ddof=1) + 1e-6) if np.ptp(env_returns) else 0.0
        assert a == pytest.approx(ref)


def test_greedy_evaluation_keeps_no_samples():
    wf = workflow()
    result, eng = run(wf, per_branch, seeds=(0, 1, 2), greedy=True)
    assert result.samples == [] and len(result.envs) == 3
    assert all(len(c[0]) <= 3 for c in eng.calls)  # K = 1


def test_trajectory_grouping_needs_parallel_sampling():
    with pytest.raises(ValueError, match="parallel"):
        load_config(None, ['rollout.grouping="trajectory"'])


@pytest.mark.parametrize("invalid", [True, False])
def test_truncated_answers_are_unparseable_by_default(invalid):
    """A response cut off at max_new_tokens answers nothing (parse penalty), unless switched off."""
    wf = workflow('task.roles=["plan"]', f"rollout.truncated_is_invalid={str(invalid).lower()}")
    replay = EnvPool("planpath", 1, **wf.env_config)
    replay.reset([0], [3], "train")
    answer = replay.solve([0]).plans[0]  # the solver's plan solves the level in one answer
    result, _ = run(wf, lambda text, i: answer + (ScriptedEngine.CUT if i % 2 else ""), seeds=(3,))
    first = sorted((s for s in result.samples if s.key.turn == 0), key=lambda s: s.branch)
    assert [s.truncated_response for s in first] == [False, True, False, True]
    assert first[0].success and first[2].success
    for s in first[1::2]:
        assert s.success != invalid
        assert (s.reward == pytest.approx(PARSE_PENALTY)) == invalid


@pytest.mark.parametrize("task", ["planpath", "sokoban", "sudoku"])
def test_compact_turn_prompts_tell_turns_apart(task):
    """compact_turn is compact plus the turn number: a greedy team back on a state it stood on is
    shown a prompt it has not seen (under compact the two prompts are equal, and so are the answers)."""
    overrides = [f'task.task="{task}"'] + ([ENV] if task == "planpath" else [])
    turn_wf = GameWorkflow(load_config(None, [*overrides, 'task.prompts="compact_turn"']))
    plain_wf = GameWorkflow(load_config(None, [*overrides, 'task.prompts="compact"']))
    pool = EnvPool(task, 1, **plain_wf.env_config)
    obs = pool.reset([0], [3], "eval").obs[0]
    for role in ("tool", "plan"):
        plain = [plain_wf.prompt_text(role, obs, t, None) for t in (0, 2)]
        turned = [turn_wf.prompt_text(role, obs, t, None) for t in (0, 2)]
        assert plain[0] == plain[1]
        assert turned[0] != turned[1]
        assert [p.replace(f"t{t + 1}\n", "", 1) for p, t in zip(turned, (0, 2))] == plain


def test_compact_turn_is_refused_outside_the_games():
    with pytest.raises(ValueError, match="compact_turn"):
        load_config(None, ['task.task="code"', 'task.prompts="compact_turn"'])


def test_response_budgets_each_agent_generates_with_its_own_max_new_tokens():
    # The tool agent (acting first each turn) has a budget of its own, the planner the caller's 16.
    wf = workflow("rollout.max_new_tokens_per_role={tool=256}")
    _, eng = run(wf, per_branch, seeds=(0,))
    budgets = [p.max_new_tokens for p in eng.params]
    assert len(budgets) >= 2 and budgets == [256, 16] * (len(budgets) // 2) + [256] * (len(budgets) % 2)
    _, eng = run(workflow(), per_branch, seeds=(0,))
    assert {p.max_new_tokens for p in eng.params} == {16}
