"""The code workflow (coder + tester) against python/atgrpo/ALGORITHM.md, with scripted engines and the real sandbox."""

from __future__ import annotations

import pytest
from scripted import grouped_advantages, run_scripted

from atgrpo.config import load_config
from atgrpo.data import load_code_problems
from atgrpo.workflows.code import CodeWorkflow, parse_assert_tests, parse_io_tests, solution_code
from atgrpo.workflows.programs import compiles, extract_code
from atgrpo.workflows.prompts import envs_dir

SUM_EVENS = 0  # fn-sum-evens (function style)
RANGE = 7  # io-range (stdio)
GOOD = "```python\ndef sum_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n```"
HALF = "```python\ndef sum_evens(nums):\n    return sum(nums)\n```"  # passes 1 of the 4 ground-truth tests
BROKEN = "```python\ndef sum_evens(nums)\n    return 0\n```"
GOOD_TESTS = "```python\nassert sum_evens([2, 4]) == 6\nassert sum_evens([1]) == 0\n```"
WRONG_TESTS = "```python\nassert sum_evens([2, 4]) == 7\n```"
IO_GOOD = "```python\nn = int(input())\nxs = list(map(int, input().split()))\nprint(max(xs) - min(xs))\n```"
IO_TESTS = "Input:\n```\n2\n1 5\n```\nOutput:\n```\n4\n```\nInput:\n```\n1\n3\n```\nExpected output:\n```\n0\n```"


@pytest.fixture(scope="module")
def problems():
    return load_code_problems(envs_dir() / "code" / "problems.jsonl")


def make(*overrides: str) -> CodeWorkflow:
    return CodeWorkflow(load_config(None, ["task.task=code", "rollout.k=4", "task.sandbox_timeout_s=1.0", *overrides]))


def run(wf: CodeWorkflow, answer, seeds=(SUM_EVENS,), offset=0, greedy=False):
    return run_scripted(wf, answer, seeds, offset, greedy)


def is_tester(prompt: str) -> bool:
    return prompt.rstrip().endswith("T:")


def test_extraction_and_parsing(problems):
    assert extract_code("text\n```python\nx = 1\n```\nmore\n```py\ny = 2\n```") == "y = 2"
    assert extract_code("```\nz = 3\n```") == "z = 3"
    assert extract_code("```python\nw = 4\n") == "w = 4"  # unclosed fence (cut by max_new_tokens)
    assert extract_code("print(1)") == "print(1)"
    assert compiles("x = 1") and not compiles("") and not compiles("def f(:") and not compiles("x = '\0'")
    body = solution_code("    return 0", problems[SUM_EVENS])
    assert body.startswith("def sum_evens(nums):") and compiles(body)
    assert parse_assert_tests(GOOD_TESTS) == ("assert sum_evens([2, 4]) == 6", "assert sum_evens([1]) == 0")
    assert parse_assert_tests("assert f(1) == 2\nassert f(( == 3\nprint(1)") == ("assert f(1) == 2",)
    assert parse_assert_tests("no tests here") == ()
    cases = parse_io_tests(IO_TESTS)
    assert [(c.input, c.output) for c in cases] == [("2\n1 5\n", "4\n"), ("1\n3\n", "0\n")]
    assert parse_io_tests("Output:\n```\n1\n```") == ()


def test_single_agent_is_single_turn_and_rewards_follow_ground_truth():
    wf = make('task.roles=["coder"]')
    answers = [GOOD, HALF, BROKEN, "I cannot do this"]
    result, eng = run(wf, lambda t, i: answers[i % 4])
    assert len(eng.calls) == 1  # one turn: done after the coder
    s = sorted(result.samples, key=lambda s: s.branch)
    assert [x.reward_team for x in s] == pytest.approx([1.0, 0.25, 0.0, 0.0])
    # coder local = (compiles + runs + passes all) / 3
    assert [x.reward_local for x in s] == pytest.approx([1.0, 2 / 3, 0.0, 0.0])
    assert [x.reward for x in s] == pytest.approx([2.0, 0.25 + 2 / 3, 0.0, 0.0])
    assert [x.success for x in s] == [True, False, False, False]
    assert {x.key for x in s} == {s[0].key} and s[0].key.agent == 0 and s[0].key.turn == 0
    assert result.envs[0].success and result.envs[0].turns == 1


def test_done_when_coder_passes_testers_tests_and_tester_rewards_validity():
    wf = make()
    answers = {False: [GOOD] * 4, True: [GOOD_TESTS, WRONG_TESTS, "nothing", GOOD_TESTS]}
    result, eng = run(wf, lambda t, i: answers[is_tester(t)][i % 4])
    tester = sorted((s for s in result.samples if s.role == "tester"), key=lambda s: s.branch)
    assert [s.reward_local for s in tester] == pytest.approx([1.0, 0.0, 0.0, 1.0])
    assert all(s.reward_team == pytest.approx(1.0) for s in tester)  # the coder's program is right
    assert len(eng.calls) == 2  # coder, tester; the chosen tests (branch 0) pass: done in turn 1
    assert result.envs[0].success and result.envs[0].turns == 1
    assert {(s.key.agent, s.key.turn) for s in result.samples} == {(0, 0), (1, 0)}


def test_mismatches_are_shown_and_the_episode_runs_to_the_turn_limit():
    wf = make("task.turns=2")
    result, eng = run(wf, lambda t, i: WRONG_TESTS if is_tester(t) else HALF)
    assert len(eng.calls) == 4  # never agree: 2 turns x 2 agents
    coder_turn2 = eng.calls[2][0][0]
    assert "sum_evens([2, 4]) == 7" in coder_turn2 and "wrong_answer" in coder_turn2
    assert "return sum(nums)" in eng.calls[3][0][0]  # the tester sees the coder's program
    assert not result.envs[0].success and result.envs[0].turns == 2
    assert {(s.key.agent, s.key.turn) for s in result.samples} == {(0, 0), (1, 0), (0, 1), (1, 1)}


def test_stdio_problem_and_group_keys_use_the_envs_own_index():
    wf = make()
    answers = {False: [IO_GOOD, "print(-1)", IO_GOOD, "```python\nwhile True: pass\n```"], True: [IO_TESTS] * 4}

    def answer(t: str, i: int) -> str:
        if "sum_evens" in t:
            return GOOD_TESTS if is_tester(t) else GOOD
        return answers[is_tester(t)][i % 4]

    result, _ = run(wf, answer, seeds=(RANGE, SUM_EVENS), offset=10)
    assert {s.key.env for s in result.samples} == {10, 11}
    _, stats, groups = grouped_advantages(result.samples, "agent_turn")
    assert set(stats.size.tolist()) == {4}
    assert groups == len({(s.key.env, s.key.agent, s.key.turn) for s in result.samples})
    io = sorted((s for s in result.samples if s.key.env == 10 and s.role == "coder"), key=lambda s: s.branch)
    assert [s.reward_team for s in io] == pytest.approx([1.0, 0.0, 1.0, 0.0])
    assert io[3].reward_local == pytest.approx(1 / 3)  # compiles, but times out
    assert result.envs[0].success and result.envs[1].success


def test_greedy_evaluation_keeps_no_samples():
    wf = make('task.roles=["coder"]')
    result, eng = run(wf, lambda t, i: GOOD, seeds=(SUM_EVENS, RANGE), greedy=True)
    assert result.samples == [] and len(eng.calls[0][0]) == 2
    assert [e.success for e in result.envs] == [True, False]


def test_hostile_programs_get_verdicts():
    wf = make('task.roles=["coder"]', "task.sandbox_timeout_s=1.0")
    hostile = [
        "```python\nimport os\nos.kill(os.getppid(), 9)\n```",
        "```python\nx = 'a' * (10**10)\n```",
        "```python\nimport sys\nsys.stdout.write('x' * 10**8)\n```",
        "```python\nimport socket\nsocket.socket()\n```",
    ]
    result, _ = run(wf, lambda t, i: hostile[i % 4])
    assert len(result.samples) == 4 and all(s.reward_team == 0 and not s.success for s in result.samples)
