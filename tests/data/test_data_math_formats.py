"""Math loaders on small synthetic files: MATH / MATH-500, AIME column variants, GSM8K shapes, atgrpo."""

from __future__ import annotations

from pathlib import Path

import pytest

from atgrpo.data import (
    DatasetRecordError,
    MathProblem,
    encode_jsonl,
    load_aime,
    load_atgrpo_math,
    load_gsm8k,
    load_hendrycks_math,
    load_math_problems,
)
from atgrpo.verify import last_boxed


def test_math_last_boxed_with_nested_braces(write_jsonl) -> None:
    rows = [
        {
            "problem": "Simplify.",
            "level": "Level 2",
            "type": "Algebra",
            "solution": "First $\\boxed{3}$ is wrong; in the end $x = \\boxed{\\frac{\\sqrt{3}}{2}}$.",
        },
        {"problem": "Pick one.", "level": "Level 1", "type": "Geometry", "solution": "So it is \\fbox{\\text{(B)}}."},
        {"problem": "Braces.", "level": "Level 5", "type": "Algebra", "solution": "Answer: $\\boxed{\\{1, 2\\}}$"},
    ]
    problems = load_hendrycks_math(write_jsonl("math.jsonl", rows))
    assert [p.answer for p in problems] == ["\\frac{\\sqrt{3}}{2}", "\\text{(B)}", "\\{1, 2\\}"]
    assert [p.id for p in problems] == ["math/0", "math/1", "math/2"]
    assert problems[0].meta == {"level": "Level 2", "type": "Algebra"} and problems.format == "math"


def test_math500_answer_field_wins(write_jsonl) -> None:
    row = {
        "problem": "Compute 2+2.",
        "solution": "It is $\\boxed{4}$.",
        "answer": "4",
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": "test/prealgebra/1.json",
    }
    problems = load_math_problems(write_jsonl("math500.jsonl", [row]))
    assert problems.format == "math"
    assert (problems[0].id, problems[0].answer, problems[0].meta["subject"]) == (
        "test/prealgebra/1.json",
        "4",
        "Prealgebra",
    )


def test_math_unclosed_box_is_a_located_error(write_jsonl) -> None:
    path = write_jsonl("math.jsonl", [{"problem": "x", "level": "1", "type": "t", "solution": "\\boxed{1"}])
    with pytest.raises(DatasetRecordError, match=r"math\.jsonl:1: .*boxed"):
        load_hendrycks_math(path)


@pytest.mark.parametrize(
    "row",
    [
        {"id": 60, "problem": "Find n.", "solution": "...", "answer": "033", "url": "u", "year": 2024},
        {"ID": "2024-I-1", "Problem": "Find n.", "Solution": "...", "Answer": 33},
        {"question": "Find n.", "answer": "33"},
    ],
    ids=["h4-style", "capitalised", "question-answer"],
)
def test_aime_column_variants(write_jsonl, row: dict) -> None:
    problems = load_aime(write_jsonl("aime.jsonl", [row]))
    assert problems[0].answer == "33" and problems[0].question == "Find n." and problems[0].source == "aime"


def test_aime_auto_format_and_bad_answers(write_jsonl) -> None:
    rows = [{"Problem": "a", "Answer": 7}, {"Problem": "b", "Answer": "1000"}, {"Problem": "c", "Answer": "1/2"}]
    problems = load_math_problems(write_jsonl("aime.jsonl", rows), on_error="skip")
    assert problems.format == "aime" and [p.answer for p in problems] == ["7"]
    assert [s.where.rsplit(":", 1)[1] for s in problems.skipped] == ["2", "3"]
    assert "outside 0..999" in problems.skipped[0].reason and "integer" in problems.skipped[1].reason


def test_gsm8k_negative_and_comma_answers(write_jsonl) -> None:
    rows = [
        {"question": "q1", "answer": "work <<1-3=-2>>\n#### -2"},
        {"question": "q2", "answer": "lots\n#### 1,250,000"},
        {"question": "q3", "answer": "#### 12.5"},
    ]
    problems = load_gsm8k(write_jsonl("gsm.jsonl", rows))
    assert [p.answer for p in problems] == ["-2", "1250000", "12.5"]
    assert problems[0].solution == "work <<1-3=-2>>"


def test_atgrpo_math_round_trip(tmp_path: Path) -> None:
    problems = [
        MathProblem(id="a", source="atgrpo", question="1/2 + 1/4?", answer="\\frac{3}{4}"),
        MathProblem(id="b", source="atgrpo", question="2 + 2?", answer="4", solution="2 + 2 = 4"),
    ]
    path = tmp_path / "set.jsonl"
    path.write_bytes(encode_jsonl(problems))
    assert list(load_atgrpo_math(path)) == problems
    assert load_math_problems(path).format == "atgrpo"


def test_last_boxed_rules() -> None:
    assert last_boxed("\\boxed{1} then \\boxed{2}") == "2"
    assert last_boxed("\\boxed{a{b}c}") == "a{b}c"
    assert last_boxed("\\boxed 5 apples") == "5"
    assert last_boxed("\\boxed{2} and a broken \\boxed{3") == "2"
    assert last_boxed("\\boxed{\\}}") == "\\}"
    assert last_boxed("no box") is None
