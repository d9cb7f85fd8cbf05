"""Loaders on the public sets in ../shared/datasets (read in place, never copied into the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest
from datarun import REPO, datasets_root, run_function_tests

from atgrpo.data import load_code_problems, load_gsm8k, load_humaneval, load_math_problems
from atgrpo.verify import parse_plain_number


def test_default_datasets_dir_is_shared_next_to_the_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATGRPO_DATASETS_DIR", raising=False)
    assert datasets_root() == (REPO / "../shared/datasets").resolve()
    monkeypatch.setenv("ATGRPO_DATASETS_DIR", "some/where")
    assert datasets_root() == REPO / "some/where"


def test_humaneval_loads_all_164(datasets_dir: Path) -> None:
    problems = load_humaneval(datasets_dir / "humaneval" / "HumanEval.jsonl.gz")
    assert len(problems) == 164 and not problems.skipped
    assert problems[0].id == "HumanEval/0"
    assert len({p.id for p in problems}) == 164
    for p in problems:
        assert p.style == "function" and p.source == "humaneval"
        assert p.tests == (f"check({p.entry_point})",)
        assert p.reference.startswith(p.prompt) and f"def {p.entry_point}" in p.prompt
        assert "def check(candidate)" in p.test_setup


def test_humaneval_auto_format_and_limit(datasets_dir: Path) -> None:
    head = load_code_problems(datasets_dir / "humaneval" / "HumanEval.jsonl.gz", limit=3)
    assert head.format == "humaneval" and [p.id for p in head] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]


def test_humaneval_references_pass_and_broken_ones_fail(datasets_dir: Path) -> None:
    """The records follow the test contract: canonical solutions pass, a stub returning None fails."""
    problems = load_humaneval(datasets_dir / "humaneval" / "HumanEval.jsonl.gz")
    jobs = [(p.reference, p) for p in problems]
    jobs += [(p.prompt + "    return None\n", p) for p in problems]
    results = run_function_tests(jobs)
    good, bad = results[:164], results[164:]
    assert all(r == [True] for r in good), [p.id for p, r in zip(problems, good) if r != [True]]
    assert all(r == [False] for r in bad), [p.id for p, r in zip(problems, bad) if r != [False]]


@pytest.mark.parametrize(("split", "count"), [("test", 1319), ("train", 7473)])
def test_gsm8k_splits(datasets_dir: Path, split: str, count: int) -> None:
    problems = load_gsm8k(datasets_dir / "gsm8k" / f"{split}.jsonl")
    assert len(problems) == count and not problems.skipped
    assert problems[0].id == "gsm8k/0"
    for p in problems:
        assert "," not in p.answer and "####" not in p.solution
        number = parse_plain_number(p.answer)
        assert number is not None and number.value.denominator == 1, (p.id, p.answer)


def test_gsm8k_first_test_problem(datasets_dir: Path) -> None:
    problems = load_math_problems(datasets_dir / "gsm8k" / "test.jsonl")
    assert problems.format == "gsm8k"
    first = problems[0]
    assert first.answer == "18" and first.question.startswith("Janet")


def test_gsm8k_comma_answers_are_stripped(datasets_dir: Path) -> None:
    raw = (datasets_dir / "gsm8k" / "train.jsonl").read_text().splitlines()
    with_commas = [i for i, line in enumerate(raw) if "####" in line and "," in line.rsplit("####", 1)[1]]
    assert with_commas  # the split has "#### 1,200"-style answers
    problems = load_gsm8k(datasets_dir / "gsm8k" / "train.jsonl")
    for i in with_commas:
        assert problems[i].answer.isdigit()
