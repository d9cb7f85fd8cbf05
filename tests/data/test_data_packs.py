"""The problem sets shipped in envs/code and envs/math load, and their reference solutions are right."""

from __future__ import annotations

from datarun import REPO, run_function_tests, run_stdio_case

from atgrpo.data import load_code_problems, load_math_problems
from atgrpo.verify import parse_plain_number

CODE = REPO / "envs" / "code" / "problems.jsonl"
MATH = REPO / "envs" / "math" / "problems.jsonl"


def test_code_pack_has_both_styles_and_docs() -> None:
    problems = load_code_problems(CODE)
    assert problems.format == "atgrpo" and not problems.skipped
    styles = [p.style for p in problems]
    assert styles.count("function") >= 5 and styles.count("stdio") >= 5
    for p in problems:
        assert p.reference and p.prompt
        if p.style == "stdio":
            assert p.public_cases and p.hidden_cases
        else:
            assert p.entry_point in p.starter_code and all(p.entry_point in t for t in p.tests)
    assert (CODE.parent / "README.md").is_file()


def test_code_pack_references_pass_and_stubs_fail() -> None:
    problems = load_code_problems(CODE)
    fns = [p for p in problems if p.style == "function"]
    results = run_function_tests([(p.reference, p) for p in fns] + [(p.starter_code + "    pass\n", p) for p in fns])
    for p, r in zip(fns, results[: len(fns)]):
        assert all(r), (p.id, r)
    for p, r in zip(fns, results[len(fns) :]):
        assert not all(r), p.id
    for p in problems:
        if p.style == "stdio":
            assert all(run_stdio_case(p.reference, c) for c in p.cases), p.id
            assert not run_stdio_case("print('?')", p.public_cases[0]), p.id


def test_math_pack_answers() -> None:
    problems = load_math_problems(MATH)
    assert problems.format == "atgrpo" and 10 <= len(problems) <= 30
    answers = [p.answer for p in problems]
    numbers = [parse_plain_number(a) for a in answers]
    assert any(n is not None and n.decimal for n in numbers)  # decimals
    assert any(n is not None and n.value.denominator > 1 and not n.decimal for n in numbers)  # fractions
    assert any(n is None for n in numbers)  # symbolic (pi, sqrt)
    assert all(p.solution for p in problems)
    assert (MATH.parent / "README.md").is_file()
