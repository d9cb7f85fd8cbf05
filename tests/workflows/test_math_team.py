"""Math teams (python/atgrpo/ALGORITHM.md, "Teams"): N reasoners, M tool agents and a judge, with scripted
engines, the real sandbox and the verifier. Group keys per agent, the judge's prompt and rewards on
hand-written cases, turns that go on while the agents disagree, a policy per agent, and the default
team's prompts unchanged."""

from __future__ import annotations

import msgspec
import pytest
from scripted import ScriptedEngine, grouped_advantages, run_scripted

from atgrpo.config import load_config
from atgrpo.engines.base import SamplingParams
from atgrpo.learner.intake import IntakeLimits, PolicyLimits, sample_fault
from atgrpo.messages import GroupKey, WorkUnit
from atgrpo.workflows.base import PolicyHandle
from atgrpo.workflows.math import Answer, MathState, MathWorkflow

MUFFINS = 0  # m01, answer 6: "A baker makes 24 muffins and sells three quarters of them before noon. ..."
TOOL_RIGHT = "```python\nprint(24 - 24 * 3 // 4)\n```"
TOOL_WRONG = "```python\nprint(7)\n```"
TEAM_3_1_1 = "task.team={reasoner=3, tool=1, judge=1}"


def make(*overrides: str) -> MathWorkflow:
    return MathWorkflow(
        load_config(
            None,
            ["task.task=math", "rollout.k=4", "task.sandbox_timeout_s=1.0", "rollout.max_new_tokens=64", *overrides],
        )
    )


def kind(prompt: str) -> str:
    """Which role a compact prompt is for: its last line is T:, R: or J:."""
    return prompt.rstrip()[-2:]


def agents_of(samples):
    return sorted({(s.key.agent, s.role) for s in samples})


def test_every_agent_has_its_own_groups_of_k():
    wf = make(TEAM_3_1_1)
    answers = {
        "T:": [TOOL_RIGHT, TOOL_WRONG] * 2,
        "R:": ["\\boxed{6}", "\\boxed{5}", "\\boxed{6}", "6"],
        "J:": ["\\boxed{6}"] * 4,
    }
    result, eng = run_scripted(wf, lambda t, i: answers[kind(t)][i % 4], seeds=(MUFFINS, 1), offset=10)
    names = ["tool", "reasoner_1", "reasoner_2", "reasoner_3", "judge"]
    assert agents_of(result.samples) == list(enumerate(names))
    keys = {}
    for s in result.samples:
        keys.setdefault(s.key, []).append(s)
    # No two agents share a group: every key holds K samples of one agent, one per branch.
    assert all(len({s.role for s in g}) == 1 and sorted(s.branch for s in g) == [0, 1, 2, 3] for g in keys.values())
    assert {k.env for k in keys} == {10, 11} and len(
        keys
    ) == 2 * 5  # envs x agents: one turn, the agents agree on both envs
    _, stats, groups = grouped_advantages(result.samples, "agent_turn")
    assert groups == len(keys) and set(stats.size.tolist()) == {4}
    # The learner's intake takes them: agent index = position of the agent's name in task.agents().
    limits = IntakeLimits.from_config(wf.cfg, {"shared": PolicyLimits(vocab_size=10_000)})
    assert limits.roles == tuple(names)
    assert all(sample_fault(s, limits) is None for s in result.samples)
    first = result.samples[0]  # the tool agent's, then under reasoner_1's index
    moved = msgspec.structs.replace(first, key=GroupKey(first.key.env, 1, first.key.turn))
    assert sample_fault(moved, limits).reason == "bad_key"


def test_judge_prompt_shows_every_agents_latest_answer_and_programs_in_paper_prompts():
    wf = make(TEAM_3_1_1, 'task.prompts="paper"')
    st = MathState(
        answers=(
            Answer("7", False, code="print(7)", output="7"),
            Answer("6", True),
            None,
            Answer("", False),
            None,
        )
    )
    problem = wf.problem_of(MUFFINS, "train")
    assert wf.prompt_text("judge", problem, st, 0) == (
        "You are the judge of a team of 1 tool agent, 3 reasoners and a judge solving a math problem. This is turn 1 of 4.\n"
        "Read the agents' latest answers below. Check each against the problem, decide which one is right "
        "(work the answer out yourself if none is), and give the team's final answer as \\boxed{answer}.\n\n"
        f"Problem:\n{problem.question.strip()}\n\n"
        "The agents' answers:\n"
        "Tool agent's program:\n```python\nprint(7)\n```\nIts output:\n7\nTool agent's answer: 7\n"
        "Reasoner 1's answer: 6\nReasoner 3's answer: (none)\n"
    )
    reasoner = wf.prompt_text("reasoner_2", problem, st, 1)
    assert reasoner.startswith(
        "You are reasoner 2 of a team of 1 tool agent, 3 reasoners and a judge solving a math problem. This is turn 2 of 4."
    )
    assert reasoner.endswith("the team is done when the answers of all 4 tool agents and reasoners agree.\n\n")
    compact = make(TEAM_3_1_1)
    assert compact.prompt_text("judge", problem, st, 0) == (
        f"{problem.question.strip()}\nTool agent's answer: 7\nReasoner 1's answer: 6\nReasoner 3's answer: (none)\nJ:\n"
    )


def test_default_team_prompts_are_unchanged():
    wf = make('task.prompts="paper"')
    problem = wf.problem_of(MUFFINS, "train")
    st = MathState(answers=(Answer("6", True, code="print(6)", output="6"), Answer("5", False)))
    assert wf.prompt_text("reasoner", problem, st, 1) == (
        "You are the reasoner of a two-agent team (a tool agent and a reasoner) solving a math problem. This is turn 2 of 4.\n"
        "Reason step by step, then give the final answer as \\boxed{answer}.\n\n"
        f"Problem:\n{problem.question.strip()}\n"
        "The team so far:\n"
        "Tool agent's program:\n```python\nprint(6)\n```\nIts output:\n6\nTool agent's answer: 6\nReasoner's answer: 5\n"
        "If you disagree, check your work; the team is done when both agents agree.\n\n"
    )
    assert wf.prompt_text("tool", problem, MathState(answers=(None, None)), 0).startswith(
        "You are the tool agent of a two-agent team (a tool agent and a reasoner) solving a math problem. This is turn 1 of 4.\n"
    )


@pytest.mark.parametrize(
    ("reasoners", "judge", "team", "local"),
    [
        (["\\boxed{6}", "\\boxed{5}"], "\\boxed{6}", 1.0, 1.0),  # a right answer on the table, picked
        (["\\boxed{6}", "\\boxed{5}"], "\\boxed{5}", 0.0, 0.0),  # one on the table, the wrong one picked
        (["\\boxed{4}", "\\boxed{5}"], "\\boxed{6}", 1.0, 0.0),  # none on the table: right alone, no pick reward
        (["\\boxed{4}", "\\boxed{5}"], "\\boxed{4}", 0.0, 0.0),
        (["\\boxed{6}", "\\boxed{6}"], "no answer at all", 0.0, 0.0),
    ],
)
def test_judge_rewards(reasoners, judge, team, local):
    wf = make("task.team={reasoner=2, judge=1}", "rollout.k=1", "task.turns=1")
    result, _ = run_scripted(
        wf, lambda t, i: judge if kind(t) == "J:" else reasoners[len(reasoners_before(t))], seeds=(MUFFINS,)
    )
    (j,) = [s for s in result.samples if s.role == "judge"]
    assert (j.reward_team, j.reward_local, j.reward) == (team, local, team + local)
    assert result.envs[0].success == bool(team)
    # The reasoners: local = (format + correct) / 2, team = their own answer while the judge has none.
    for s, text in zip(sorted((s for s in result.samples if s.role != "judge"), key=lambda s: s.key.agent), reasoners):
        right = float(text == "\\boxed{6}")
        assert (s.reward_team, s.reward_local) == (right, (1.0 + right) / 2)


def reasoners_before(prompt: str) -> list[str]:
    """Reasoners that answered before this prompt (compact: one 'Reasoner i's answer' line each)."""
    return [ln for ln in prompt.splitlines() if ln.startswith("Reasoner")]


def test_turns_go_on_while_the_agents_disagree_and_the_judge_acts_once_per_turn():
    wf = make("task.team={reasoner=2, tool=1, judge=1}", "rollout.k=2", "task.turns=3")

    # Turn 0: the reasoners disagree. Turn 1: they all answer 6.
    def answer(t, i):
        turn = t.count("Judge's answer")
        if kind(t) == "T:":
            return TOOL_RIGHT
        if kind(t) == "J:":
            return "\\boxed{6}"
        return "\\boxed{6}" if turn or not reasoners_before(t) else "\\boxed{9}"

    result, eng = run_scripted(wf, answer, seeds=(MUFFINS,))
    turns = sorted({(s.key.turn, s.key.agent) for s in result.samples})
    assert turns == [(t, a) for t in (0, 1) for a in range(4)]  # two turns, each with one judge step
    assert [c[0][0].rstrip()[-2:] for c in eng.calls] == ["T:", "R:", "R:", "J:"] * 2
    assert result.envs[0].success and result.envs[0].turns == 2
    # Agreeing agents do not end the episode before the judge has answered in that turn.
    judge_t1 = [s for s in result.samples if s.role == "judge" and s.key.turn == 1]
    assert all(s.reward_team == 1.0 for s in judge_t1)


def test_without_a_judge_several_reasoners_are_done_when_all_agree():
    wf = make("task.team={reasoner=3}", "rollout.k=1", "task.turns=3")
    result, eng = run_scripted(wf, lambda t, i: "\\boxed{6}", seeds=(MUFFINS,))
    assert len(eng.calls) == 3 and result.envs[0].turns == 1 and result.envs[0].success


def test_a_policy_per_agent():
    cfg = load_config(
        None,
        [
            "task.task=math",
            "rollout.k=2",
            "task.turns=1",
            "rollout.max_new_tokens=64",
            TEAM_3_1_1,
            "policies={a={}, b={}}",
            'role_policy={tool="a", reasoner="a", judge="a", reasoner_2="b"}',
        ],
    )
    assert cfg.agent_policy() == {"tool": "a", "reasoner_1": "a", "reasoner_2": "b", "reasoner_3": "a", "judge": "a"}
    wf = MathWorkflow(cfg)
    a = ScriptedEngine(lambda t, i: TOOL_RIGHT if kind(t) == "T:" else "\\boxed{6}", "a")
    b = ScriptedEngine(lambda t, i: "\\boxed{6}", "b")
    unit = WorkUnit(0, 0, [MUFFINS], 0, "train", {"a": 0, "b": 0})
    try:
        result = wf.run(
            unit,
            {"a": PolicyHandle(a, a.tokenizer), "b": PolicyHandle(b, b.tokenizer)},
            SamplingParams(max_new_tokens=8),
        )
    finally:
        wf.close()
    assert {s.role for s in result.samples if s.policy == "b"} == {"reasoner_2"}
    assert len(b.calls) == 1 and len(a.calls) == 4
    limits = IntakeLimits.from_config(cfg, {"a": PolicyLimits(10_000), "b": PolicyLimits(10_000)})
    assert all(sample_fault(s, limits) is None for s in result.samples)
