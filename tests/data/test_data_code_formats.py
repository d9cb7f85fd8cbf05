"""Code loaders on small synthetic files in each public format (field names as the datasets ship them)."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest
from datarun import run_function_tests, run_stdio_case

from atgrpo.data import (
    CodeProblem,
    IOCase,
    encode_jsonl,
    load_apps,
    load_atgrpo_code,
    load_code_problems,
    load_codecontests,
    load_livecodebench,
    load_mbpp,
)

MBPP_ORIGINAL = {
    "task_id": 601,
    "text": "Write a function to double every element of a list.",
    "code": "def double_all(xs):\r\n    return [2 * x for x in xs]",
    "test_list": ["assert double_all([1, 2]) == [2, 4]", "assert double_all([]) == []"],
    "test_setup_code": "",
    "challenge_test_list": ["assert double_all([-1]) == [-2]"],
}
MBPP_SANITIZED = {
    "source_file": "x.py",
    "task_id": 602,
    "prompt": "Write a function that returns the square root of a number rounded to 2 places.",
    "code": "import math\ndef root2(x):\n    return round(math.sqrt(x), 2)",
    "test_imports": ["import math"],
    "test_list": ["assert math.isclose(root2(2), 1.41)", "assert root2(9) == 3.0"],
}


def test_mbpp_original_jsonl(write_jsonl) -> None:
    path = write_jsonl("mbpp.jsonl", [MBPP_ORIGINAL])
    (p,) = load_mbpp(path)
    assert (p.id, p.source, p.style, p.entry_point) == ("601", "mbpp", "function", "double_all")
    assert p.tests == tuple(MBPP_ORIGINAL["test_list"])
    assert "Your code should pass these tests:" in p.prompt and "double_all([1, 2])" in p.prompt
    assert load_mbpp(path, with_challenge_tests=True)[0].tests[-1] == "assert double_all([-1]) == [-2]"
    assert load_mbpp(path, show_tests=False)[0].prompt == MBPP_ORIGINAL["text"]
    assert run_function_tests([(p.reference, p), ("def double_all(xs):\n    return xs\n", p)]) == [
        [True, True],
        [False, True],
    ]


def test_mbpp_sanitized_json_array(tmp_path: Path) -> None:
    path = tmp_path / "sanitized-mbpp.json"
    path.write_text(json.dumps([MBPP_SANITIZED, MBPP_ORIGINAL], indent=2))
    problems = load_code_problems(path)
    assert problems.format == "mbpp" and [p.id for p in problems] == ["602", "601"]
    p = problems[0]
    assert p.test_setup == "import math" and p.entry_point == "root2"
    assert run_function_tests([(p.reference, p)]) == [[True, True]]


APPS_STDIO = {
    "problem_id": 17,
    "question": "Read two integers and print their sum.",
    "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
    "input_output": json.dumps({"inputs": ["1 2\n", ["3 4"]], "outputs": ["3\n", ["7"]]}),
    "difficulty": "introductory",
    "url": "https://example.invalid/17",
    "starter_code": "",
}
APPS_CALL = {
    "problem_id": 18,
    "question": "Return the largest element and its index.",
    "solutions": json.dumps(["def top(xs):\n    i = max(range(len(xs)), key=xs.__getitem__)\n    return xs[i], i\n"]),
    "input_output": json.dumps({"fn_name": "top", "inputs": [[[3, 9, 2]], [[5]]], "outputs": [[[9, 1]], [5, 0]]}),
    "difficulty": "interview",
    "url": "",
    "starter_code": "def top(xs):\n\t",
}
APPS_LEETCODE = {
    "problem_id": 19,
    "question": "Count the vowels of a word.",
    "solutions": "",
    "input_output": json.dumps({"fn_name": "countVowels", "inputs": [["banana"], ["xyz"]], "outputs": [[3], [0]]}),
    "difficulty": "interview",
    "url": "",
    "starter_code": "class Solution:\n    def countVowels(self, word: str) -> int:\n        ",
}


def test_apps_stdin_stdout(write_jsonl) -> None:
    (p,) = load_apps(write_jsonl("apps.jsonl", [APPS_STDIO]))
    assert (p.id, p.style, p.meta["difficulty"]) == ("17", "stdio", "introductory")
    assert p.cases == (IOCase("1 2\n", "3\n"), IOCase("3 4", "7"))  # lists of lines are joined
    assert all(run_stdio_case(p.reference, c, p) for c in p.cases)
    assert not run_stdio_case("print(0)", p.cases[0], p)
    assert run_stdio_case("print(sum(map(int, sys.stdin.read().split())))", p.cases[0], p)  # judge imports


def test_apps_call_based_function_and_solution_class(write_jsonl) -> None:
    fn, leet = load_apps(write_jsonl("apps.jsonl", [APPS_CALL, APPS_LEETCODE]))
    assert fn.style == "function" and fn.entry_point == "top" and len(fn.tests) == 2
    assert fn.starter_code == "def top(xs):\n\t"
    leet_solution = (
        "class Solution:\n    def countVowels(self, word):\n        return sum(c in 'aeiou' for c in word)\n"
    )
    results = run_function_tests([(fn.reference, fn), ("def top(xs):\n    return (0, 0)\n", fn), (leet_solution, leet)])
    # a tuple result compares as a list; APPS wraps single return values in a list ([[9, 1]] vs [5, 0])
    assert results == [[True, True], [False, False], [True, True]]


def test_codecontests_tests_limits_and_python3_reference(tmp_path: Path) -> None:
    row = {
        "name": "1000_A. Double It",
        "description": "Print twice the given integer.",
        "public_tests": {"input": ["2\n"], "output": ["4\n"]},
        "private_tests": {"input": ["0\n", "-3\n"], "output": ["0\n", "-6\n"]},
        "generated_tests": {"input": ["7\n"], "output": ["14\n"]},
        "source": 2,
        "difficulty": 7,
        "solutions": {
            "language": [2, 1, 3],
            "solution": ["int main(){}", "print input()*2", "print(int(input()) * 2)"],
        },
        "incorrect_solutions": {"language": [], "solution": []},
        "cf_contest_id": 1000,
        "cf_index": "A",
        "cf_points": 500.0,
        "cf_rating": 800,
        "cf_tags": ["math", "implementation"],
        "is_description_translated": False,
        "untranslated_description": "",
        "time_limit": {"seconds": 2, "nanos": 500000000},
        "memory_limit_bytes": 256000000,
        "input_file": "",
        "output_file": "",
    }
    path = tmp_path / "cc.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (p,) = load_code_problems(path)
    assert p.source == "codecontests" and p.id == "1000_A. Double It" and p.style == "stdio"
    assert p.public_cases == (IOCase("2\n", "4\n"),) and len(p.hidden_cases) == 2
    assert p.reference == "print(int(input()) * 2)"
    assert p.time_limit_s == 2.5 and p.memory_limit_mb == 244
    assert p.meta["cf_tags"] == "math, implementation" and p.meta["cf_rating"] == 800
    assert len(load_codecontests(path, with_generated_tests=True)[0].hidden_cases) == 3
    assert all(run_stdio_case(p.reference, c) for c in p.cases)

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "cc.parquet")
    (q,) = load_codecontests(tmp_path / "cc.parquet")
    assert q == p


def _lcb_compress(cases: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def test_livecodebench_stdin_with_compressed_private_tests(write_jsonl) -> None:
    row = {
        "question_title": "Shout",
        "question_content": "Print the input line in upper case.",
        "platform": "atcoder",
        "question_id": "abc999_a",
        "contest_id": "abc999",
        "contest_date": "2025-01-01T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps([{"input": "abc\n", "output": "ABC\n", "testtype": "stdin"}]),
        "private_test_cases": _lcb_compress(
            [
                {"input": "x\n", "output": "X\n", "testtype": "stdin"},
                {"input": "Hi\n", "output": "HI\n", "testtype": "stdin"},
            ]
        ),
        "metadata": "{}",
    }
    (p,) = load_livecodebench(write_jsonl("lcb.jsonl", [row]))
    assert (p.id, p.style, p.meta["platform"]) == ("abc999_a", "stdio", "atcoder")
    assert p.public_cases == (IOCase("abc\n", "ABC\n"),)
    assert p.hidden_cases == (IOCase("x\n", "X\n"), IOCase("Hi\n", "HI\n"))


def test_livecodebench_functional_leetcode(write_jsonl) -> None:
    row = {
        "question_title": "Pair Sum",
        "question_content": "Return indices of two numbers adding up to target.",
        "platform": "leetcode",
        "question_id": "9001",
        "contest_id": "weekly-999",
        "contest_date": "2025-01-02T00:00:00",
        "starter_code": "class Solution:\n    def pairSum(self, nums: List[int], target: int) -> List[int]:\n        ",
        "difficulty": "medium",
        "public_test_cases": json.dumps([{"input": "[2, 7, 11]\n9", "output": "[0, 1]", "testtype": "functional"}]),
        "private_test_cases": json.dumps(
            [
                {"input": "[1, 5, 3]\n8", "output": "[1, 2]", "testtype": "functional"},
                {"input": "[1, 2]\n10", "output": "[0, 1]", "testtype": "functional"},
            ]
        ),
        "metadata": json.dumps({"func_name": "pairSum"}),
    }
    (p,) = load_code_problems(write_jsonl("lcb.jsonl", [row]))
    assert p.source == "livecodebench" and p.style == "function" and p.entry_point == "pairSum"
    assert len(p.tests) == 3
    solution = (
        "class Solution:\n    def pairSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        for i in range(len(nums)):\n            for j in range(i + 1, len(nums)):\n"
        "                if nums[i] + nums[j] == target:\n                    return (i, j)\n        return []\n"
    )
    assert run_function_tests([(solution, p)]) == [[True, True, False]]  # no pair sums to 10
    assert "from typing import *" in p.prelude  # the stub's List works as under LCB's own judge


def test_atgrpo_native_round_trip(tmp_path: Path) -> None:
    problems = [
        CodeProblem(id="a", source="atgrpo", prompt="p", style="function", tests=("assert f() == 1",)),
        CodeProblem(
            id="b", source="atgrpo", prompt="q", style="stdio", hidden_cases=(IOCase("1\n", "1\n"),), meta={"level": 2}
        ),
    ]
    path = tmp_path / "set.jsonl"
    path.write_bytes(encode_jsonl(problems))
    loaded = load_atgrpo_code(path)
    assert list(loaded) == problems and loaded.format == "atgrpo"
    assert load_code_problems(path).format == "atgrpo"
