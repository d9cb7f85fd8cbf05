"""The printing-program cache: within one batch, the same program text runs once and its copies share
the result; different texts never share one; results come back in answer order."""

from __future__ import annotations

import pytest
from tool_batch import FakeResult, FakeTest

from atgrpo.config import load_config
from atgrpo.workflows import programs
from atgrpo.workflows.programs import LazySandbox, run_printing_programs


@pytest.fixture
def programs_are_their_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built `Program` does not show its code, so the counting sandbox is handed the text itself."""
    monkeypatch.setattr(programs, "stdio_program", lambda code, cases: code)


class CountingSandbox:
    """Stands in for `LazySandbox`: records every program it is asked to run and "prints" a result
    unique to each run, so two answers that share a run are told apart from two that ran alike."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def get(self) -> "CountingSandbox":
        return self

    def run_batch(self, programs) -> list[FakeResult]:
        out = []
        for program in programs:
            self.ran.append(program)
            out.append(FakeResult([FakeTest("passed", "", f"run {len(self.ran)}".encode())]))
        return out


@pytest.mark.usefixtures("programs_are_their_text")
def test_same_text_runs_once_and_copies_share_its_result() -> None:
    sb = CountingSandbox()
    a, b = "print('[U]')", "print('[D]')"
    answers = [f"```python\n{a}\n```", b, a, f"prose first\n```python\n{a}\n```", "def broken(:", b]
    runs = run_printing_programs(sb, answers)  # type: ignore[arg-type]
    assert sb.ran == [a, b]  # one run per distinct compiling text, in first-seen order
    assert [r.code for r in runs] == [a, b, a, a, "def broken(:", b]
    assert [r.text for r in runs] == ["run 1", "run 2", "run 1", "run 1", "", "run 2"]
    assert runs[4].verdict is None  # does not compile: never run, never given another's result


@pytest.mark.usefixtures("programs_are_their_text")
def test_different_texts_never_share_a_result() -> None:
    sb = CountingSandbox()
    texts = ["print(1)", "print(1) ", "print( 1)", "print(1)\n#", "print(2)"]
    runs = run_printing_programs(sb, texts)  # type: ignore[arg-type]
    # extract_code strips trailing whitespace only, so "print(1) " is the text "print(1)"
    assert sb.ran == ["print(1)", "print( 1)", "print(1)\n#", "print(2)"]
    assert [r.text for r in runs] == ["run 1", "run 1", "run 2", "run 3", "run 4"]


@pytest.mark.usefixtures("programs_are_their_text")
def test_the_cache_lives_for_one_batch() -> None:
    sb = CountingSandbox()
    run_printing_programs(sb, ["print(1)"])  # type: ignore[arg-type]
    again = run_printing_programs(sb, ["print(1)"])  # type: ignore[arg-type]
    assert len(sb.ran) == 2 and again[0].text == "run 2"


def test_real_sandbox_copies_share_the_real_output() -> None:
    lazy = LazySandbox(load_config(None, ["task.sandbox_timeout_s=0.5"]))
    try:
        runs = run_printing_programs(lazy, ["print('[U, R]')", "while True:\n    pass", "print('[U, R]')"])
    finally:
        lazy.close()
    assert [r.text.strip() for r in runs] == ["[U, R]", "", "[U, R]"]
    assert runs[0].ran and runs[2].ran and runs[1].verdict == "timeout"
