"""The math workflow (tool agent + reasoner) against python/atgrpo/ALGORITHM.md, with scripted engines, the real
sandbox and the verifier (integer answers, so the exact-number fast path decides them)."""

from __future__ import annotations

import pytest
from scripted import grouped_advantages, run_scripted

from atgrpo.config import load_config
from atgrpo.workflows.math import MathWorkflow, program_answer

MUFFINS = 0  # m01, answer 6
TRAIN = 1  # m02, answer 72
TOOL_RIGHT = "```python\nprint('working...')\nprint(24 - 24 * 3 // 4)\n```"
TOOL_WRONG = "```python\nprint(7)\n```"
TOOL_CRASH = "```python\nraise SystemExit(3)\n```"
TOOL_HOSTILE = "```python\nprint(__import__('os').system('echo hi'))\nwhile True: pass\n```"
REASON_RIGHT = "24 * 3/4 = 18 sold, so \\boxed{6}"
REASON_WRONG = "\\boxed{5}"
REASON_UNBOXED = "The answer is 6."


def make(*overrides: str) -> MathWorkflow:
    return MathWorkflow(load_config(None, ["task.task=math", "rollout.k=4", "task.sandbox_timeout_s=1.0", *overrides]))


def run(wf, answer, seeds=(MUFFINS,), offset=0, greedy=False):
    return run_scripted(wf, answer, seeds, offset, greedy)


def is_tool(prompt: str) -> bool:
    return prompt.rstrip().endswith("T:")


def by_branch(samples, role):
    return sorted((s for s in samples if s.role == role), key=lambda s: s.branch)


def test_program_answer_is_the_last_printed_line():
    assert program_answer(b"a\n 42 \n\n") == "42"
    assert program_answer(b"") == "" and program_answer(b"\xff\xfe\n") == "\ufffd\ufffd"
    assert len(program_answer(b"9" * 10_000)) == 200


def test_tool_then_reasoner_rewards_and_done_on_agreement():
    wf = make()
    tools = [TOOL_WRONG, TOOL_RIGHT, TOOL_CRASH, TOOL_HOSTILE]
    reasons = [REASON_WRONG, REASON_RIGHT, REASON_UNBOXED, "no idea"]
    result, eng = run(wf, lambda t, i: (tools if is_tool(t) else reasons)[i % 4])
    tool = by_branch(result.samples, "tool")
    # Before the reasoner answers, the team answer is the tool agent's.
    assert [s.reward_team for s in tool] == [0.0, 1.0, 0.0, 0.0]
    assert [s.reward_local for s in tool] == pytest.approx([0.5, 1.0, 0.0, 0.0])
    # The reasoner sees the chosen tool answer (branch 1: 6) and is done when it agrees.
    assert all("Tool agent's answer: 6" in p for p in eng.calls[1][0])
    reasoner = by_branch(result.samples, "reasoner")
    assert [s.reward_team for s in reasoner] == [0.0, 1.0, 1.0, 0.0]
    assert [s.reward_local for s in reasoner] == pytest.approx([0.5, 1.0, 0.5, 0.0])
    assert [s.reward for s in reasoner] == pytest.approx([0.5, 2.0, 1.5, 0.0])
    assert len(eng.calls) == 2 and result.envs[0].success and result.envs[0].turns == 1
    assert {(s.key.agent, s.key.turn) for s in result.samples} == {(0, 0), (1, 0)}


def test_disagreement_runs_to_the_turn_limit_and_later_turns_see_both_answers():
    wf = make("task.turns=2")
    result, eng = run(wf, lambda t, i: TOOL_WRONG if is_tool(t) else REASON_RIGHT)
    assert len(eng.calls) == 4
    assert "Reasoner's answer: 6" in eng.calls[2][0][0] and "Tool agent's answer: 7" in eng.calls[2][0][0]
    assert result.envs[0].success  # the reasoner's (final) answer is right
    tool_turn2 = [s for s in result.samples if s.role == "tool" and s.key.turn == 1]
    assert all(s.reward_team == 1.0 and s.reward_local == 0.5 for s in tool_turn2)


def test_single_agent_reasoner_is_single_turn():
    wf = make('task.roles=["reasoner"]', "task.turns=4")
    result, eng = run(wf, lambda t, i: [REASON_RIGHT, REASON_WRONG][i % 2], seeds=(MUFFINS, TRAIN), offset=3)
    assert len(eng.calls) == 1
    assert {s.key.env for s in result.samples} == {3, 4}
    _, stats, groups = grouped_advantages(result.samples, "agent_turn")
    assert set(stats.size.tolist()) == {4} and groups == 2
    assert [e.success for e in result.envs] == [True, False]


def test_single_agent_tool_and_greedy_eval():
    wf = make('task.roles=["tool"]')
    result, eng = run(wf, lambda t, i: TOOL_RIGHT, seeds=(MUFFINS, TRAIN), greedy=True)
    assert result.samples == [] and [e.success for e in result.envs] == [True, False]
