"""Final-answer extraction rules (see atgrpo.verify.extract)."""

from __future__ import annotations

import pytest

from atgrpo.verify import clean_answer, extract_answer


@pytest.mark.parametrize(
    ("text", "answer", "rule"),
    [
        ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", "boxed"),
        ("\\boxed{3} at first, finally \\boxed{4}", "4", "boxed"),
        ("The answer is \\boxed{\\text{(B)}} and #### 7", "\\text{(B)}", "boxed"),
        ("broken \\boxed{5 but #### 6", "6", "hashes"),
        ("Natalia sold 48+24 = 72 clips.\n#### 72", "72", "hashes"),
        ("#### 1,234\n", "1,234", "hashes"),
        ("Thus the final answer is $18.", "18", "answer_phrase"),
        ("The answer is 18 dollars.", "18", "answer_phrase"),
        ("ANSWER: 3/4", "3/4", "answer_phrase"),
        ("The answer is $\\frac{\\sqrt{3}}{2}$.", "\\frac{\\sqrt{3}}{2}", "answer_phrase"),
        ("Final answer: **-12.5**", "-12.5", "answer_phrase"),
        ("The answer is x = 5.", "x = 5", "answer_phrase"),
        ("answer = 25%", "25%", "answer_phrase"),
        ("First 12, then 3 more, so 15 apples", "15", "last_number"),
        ("It costs 1,250,000 in total", "1,250,000", "last_number"),
        ("from 3-2 we get", "2", "last_number"),
        ("a ratio of 3/8", "3/8", "last_number"),
        ("x2 is a name, 0.5 is not", "0.5", "last_number"),
    ],
)
def test_rules(text: str, answer: str, rule: str) -> None:
    found = extract_answer(text)
    assert found is not None and (found.text, found.rule) == (answer, rule)


@pytest.mark.parametrize("text", ["", "no digits here", "\\boxed{}", "The answer is"])
def test_no_answer(text: str) -> None:
    assert extract_answer(text) is None


def test_clean_answer() -> None:
    assert clean_answer("  $\\frac{1}{2}$. ") == "\\frac{1}{2}"
    assert clean_answer("\\(42\\)") == "42"
    assert clean_answer("**7**.") == "7"
    assert clean_answer("$5") == "5"
    assert clean_answer("\\$5") == "\\$5"
