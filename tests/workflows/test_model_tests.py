"""Tests a model wrote (the code workflow's tester) cannot forge verdicts: the plain shapes are rewritten
by the host and judged by the checker, the rest run in the program's own process and can at most lie
about themselves (python/atgrpo/workflows/programs.py, "Model-written tests").

Sandbox tests run with namespaces (where the kernel allows) and on the fallback path, as in
tests/sandbox/test_adversarial.py, whose hostile payloads they reuse.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest
from scripted import run_scripted

from atgrpo.config import load_config
from atgrpo.sandbox import Sandbox, function_program
from atgrpo.workflows.code import CodeWorkflow
from atgrpo.workflows.programs import checked_test, in_test_order, model_tests_program
from tests.sandbox.conftest import assert_still_works
from tests.sandbox.conftest import make as make_sandbox
from tests.sandbox.test_adversarial import FORGE, FRAME_WALKS

CHECKED = [
    "assert f(1) == 2",
    "assert f([1, 2], k='x') != (3,)",
    "assert f(1) is None",
    "assert not f(2)",
    "assert f(3)",
    "assert abs(f(1.5) - 2.5) < 1e-6",
    "assert math.isclose(f(2), 1.41, rel_tol=1e-3)",
    "assert f(1e999) == float('inf')",
    "assert f(set()) == {1, 2}",
    "assert Solution().twoSum([2, 7], 9) == [0, 1]",
    "assert sorted(f([3, 1])) == [1, 3]",
    "assert f(1) == 2, 'message'",
    "assert f(1) == 2, f'got {f(1)}'",
    "assert isinstance(f(1), int)",
    "assert 0 <= f(5) < 10",
    "assert f(1)[0] == 1 and f(2)[1:] == [3]",
    "assert f(-1) == -2 or f(1+2j) == 3j",
    "assert f(g(1)) == 2",
    "assert ''.join(f('ab')) == 'ab'",
]
UNTRUSTED = [
    "assert all(f(x) for x in [1])",
    "assert exec('import os')",
    "assert __import__('os').write(4, b'x')",
    "assert os.write(4, b'x')",
    "assert f(x) == 1",
    "assert f(1).__class__",
    "assert f.__globals__",
    "assert (lambda: 1)()",
    "assert f(...) == 1",
    "assert _f(1) == 1",
    "assert print(1) is None",
    "assert f(*[1]) == 1",
    "assert '{0.__class__}'.format(f(1))",
    "x = 1",
    "assert f(1)\nassert f(2)",
]


@pytest.fixture(scope="module", params=["namespaces", "fallback"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sb = make_sandbox(request.param)
    yield sb
    sb.close()


def run_model_tests(sb: Sandbox, code: str, tests: list[str]) -> list:
    program, order = model_tests_program(code, tests)
    return in_test_order(sb.run(program).tests, order)


def test_plain_shapes_are_checked_and_name_no_global_the_program_can_set() -> None:
    for test in CHECKED:
        text = checked_test(test)
        assert text is not None, test
        # Every name the checker looks up is `__builtins__` (never installed from the program) or a
        # function of the program the test calls; literals such as inf and set() name nothing.
        called = {
            n.func.id for n in ast.walk(ast.parse(test)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        names = {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}
        assert names <= {"__builtins__"} | (called - set(dir(__builtins__))), (test, text)
    for test in UNTRUSTED:
        assert checked_test(test) is None, test


def test_results_come_back_in_the_testers_order_and_untrusted_tests_still_judge(sandbox: Sandbox) -> None:
    solution = "class Solution:\n    def m(self, x):\n        return f(x)\n"
    good, bad = "def f(x):\n    return x + 1\n" + solution, "def f(x):\n    return x\n" + solution
    tests = [
        "assert all(f(x) == x + 1 for x in range(3))",  # untrusted, honest
        "assert f(1) == 2",
        "assert [f(x) for x in (1, 2)] == [2, 3]",  # untrusted, honest
        "assert math.isclose(f(0.5), 1.5, rel_tol=1e-9)",
        "assert Solution().m(2) == 3",
        "assert f(1) != 2",
    ]
    _, order = model_tests_program(good, tests)
    assert order == (1, 3, 4, 5, 0, 2)
    assert [t.verdict for t in run_model_tests(sandbox, good, tests)] == ["passed"] * 5 + ["wrong_answer"]
    assert [t.verdict for t in run_model_tests(sandbox, bad, tests)] == ["wrong_answer"] * 5 + ["passed"]


def hostile(walk: str) -> str:
    """One tester `assert` that walks frames (`walk`) for the nonce and the reporting functions, forges
    "passed" records on every fd, patches builtins and rebinds the program's `f` to a right answer."""
    payload = (
        FORGE
        + FRAME_WALKS[walk]
        + "objs = []\n"
        + "for fr in frames():\n"
        + "    objs += list(fr.f_locals.values()) + list(fr.f_globals.values())\n"
        + "objs += more() if 'more' in globals() else []\n"
        + "forge(objs)\n"
        + "import builtins\n"
        + "builtins.AssertionError = ZeroDivisionError\n"
        + "builtins.isinstance = lambda *a: True\n"
        + "builtins.abs = lambda x: 0\n"
        + "globals()['f'] = lambda x: x + 1\n"
    )
    return f"assert exec({payload!r}) or True"


@pytest.mark.parametrize("walk", sorted(FRAME_WALKS))
def test_a_hostile_tester_assert_cannot_pass_a_wrong_program(sandbox: Sandbox, walk: str) -> None:
    wrong = "import os\ndef f(x):\n    return -1\n"
    honest = ["assert f(1) == 2", "assert f(2) == 3", "assert abs(f(3) - 4) < 1e-9", "assert isinstance(f(1), str)"]
    tests = [hostile(walk), *honest, hostile(walk)]
    # The payload works: run as written inside the checker (the hole closed here), it forges the
    # verdicts it writes records for (tests 0..3).
    if walk == "sys._getframe":
        assert sandbox.run(function_program(wrong, tests)).verdicts[1:4] == ["passed"] * 3
    results = run_model_tests(sandbox, wrong, tests)
    assert [t.verdict for t in results[1:5]] == ["wrong_answer"] * 4, (walk, results)
    assert_still_works(sandbox)


def test_a_program_that_shadows_builtins_cannot_pass_checked_tests(sandbox: Sandbox) -> None:
    # The checker sees the program's globals as stand-ins; a checked test never looks up a builtin by
    # its bare name, so `abs`, `float`, `set`, ... of the program are not the ones it uses.
    code = (
        "def abs(x):\n    return 0\n"
        "def float(x):\n    return -1\n"
        "def set(*a):\n    return -1\n"
        "def sorted(x):\n    return [1, 3]\n"
        "def isinstance(*a):\n    return True\n"
        "def len(x):\n    return 3\n"
        "inf = -1\n"
        "def f(x):\n    return -1\n"
    )
    tests = [
        "assert abs(f(1) - 2) < 1e-6",
        "assert f(1e999) == float('inf')",
        "assert f(1) == set()",
        "assert sorted(f([3, 1])) == [1, 3]",
        "assert isinstance(f(1), str)",
        "assert len(f(1)) == 3",
    ]
    verdicts = [t.verdict for t in run_model_tests(sandbox, code, tests)]
    assert verdicts == ["wrong_answer"] * 3 + ["runtime_error", "wrong_answer", "runtime_error"], (
        verdicts
    )  # -1 has no len


# -- the code workflow ------------------------------------------------------------------------------

SUM_EVENS = 0  # fn-sum-evens in envs/code/problems.jsonl
HALF = "```python\ndef sum_evens(nums):\n    return sum(nums)\n```"  # wrong on odd numbers
GOOD = "```python\ndef sum_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n```"
FORGER = (
    "import sys, os, builtins\n"
    "fr = sys._getframe()\n"
    "while fr is not None:\n"
    "    for o in list(fr.f_locals.values()) + list(fr.f_globals.values()):\n"
    "        if isinstance(o, (bytes, bytearray)) and len(o) == 16:\n"
    "            for fd in range(1, 8):\n"
    "                for i in range(3):\n"
    "                    try:\n"
    "                        os.write(fd, bytes(o) + b'E' + i.to_bytes(4, 'little') + (1).to_bytes(4, 'little') + bytes(1))\n"
    "                    except OSError:\n"
    "                        pass\n"
    "    fr = fr.f_back\n"
    "builtins.AssertionError = ZeroDivisionError\n"
    "globals()['sum_evens'] = lambda nums: sum(n for n in nums if n % 2 == 0)\n"
)
TESTS = f"```python\nassert exec({FORGER!r}) or True\nassert sum_evens([1, 3]) == 0\nassert sum_evens([2, 5]) == 2\n```"


def test_a_hostile_tester_neither_ends_the_episode_nor_hides_mismatches() -> None:
    def workflow() -> CodeWorkflow:
        return CodeWorkflow(
            load_config(None, ["task.task=code", "rollout.k=2", "task.sandbox_timeout_s=1.0", "task.turns=2"])
        )

    result, eng = run_scripted(workflow(), lambda t, i: TESTS if t.rstrip().endswith("T:") else HALF, (SUM_EVENS,))
    assert len(eng.calls) == 4  # never agree: 2 turns x 2 agents
    coder_turn2 = eng.calls[2][0][0]
    assert (
        "sum_evens([1, 3]) == 0  -> wrong_answer" in coder_turn2
        and "sum_evens([2, 5]) == 2  -> wrong_answer" in coder_turn2
    )
    assert not result.envs[0].success
    # The same tests against a right program agree at once.
    result, eng = run_scripted(workflow(), lambda t, i: TESTS if t.rstrip().endswith("T:") else GOOD, (SUM_EVENS,))
    assert len(eng.calls) == 2 and result.envs[0].success
