"""Typed problem records: what every loader returns, whatever format the file was in.

Records are frozen `msgspec.Struct`s, so a problem set can be written as JSONL (`encode_jsonl`) and read back
with `format="atgrpo"`; the task packs in `envs/code` and `envs/math` are stored that way.

How a `CodeProblem`'s tests are run (the contract the sandbox implements):

- The program is `prelude`, a newline, then the candidate solution (the prelude holds the imports the
  dataset's own judge provides, e.g. `from typing import *` for LeetCode stubs that use `List`).
- `style="function"`: the program, then `test_setup`, run in one module namespace; then each entry of
  `tests` is executed in that same namespace, one verdict per entry. An entry passes when it runs without
  raising (they are `assert ...` lines, or calls like `check(fn)` that assert).
- `style="stdio"`: the program is run once per case with `input` on stdin; it passes when its stdout
  equals `output` up to trailing whitespace on each line and trailing blank lines. Ground truth is
  `public_cases + hidden_cases`; only `public_cases` come from the statement.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, TypeVar, overload

import msgspec

MetaValue = str | int | float | bool | None


class IOCase(msgspec.Struct, frozen=True):
    """One stdin/stdout test: feed `input`, expect `output`."""

    input: str
    output: str


class CodeProblem(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A programming problem with the tests that decide it (see the module docstring for how they run)."""

    id: str
    """Unique within its file (the dataset's own id where it has one)."""
    source: str
    """Format it was loaded from: humaneval, mbpp, apps, codecontests, livecodebench, atgrpo."""
    prompt: str
    """The problem statement as the dataset gives it (MBPP: the text plus its test lines)."""
    style: Literal["function", "stdio"]
    entry_point: str = ""
    """Function (or `Solution` method) the tests call; empty for stdio problems."""
    starter_code: str = ""
    """Code the model is asked to complete (HumanEval's prompt, LeetCode class stubs); may be empty."""
    prelude: str = ""
    """Python placed before the candidate solution (imports its judge provides); usually empty."""
    test_setup: str = ""
    """Python run after the solution and before the tests: imports, helpers, HumanEval's `check`."""
    tests: tuple[str, ...] = ()
    """Function style: Python statements, one verdict each; a test passes when it does not raise."""
    public_cases: tuple[IOCase, ...] = ()
    """Stdio style: the examples shown in the statement."""
    hidden_cases: tuple[IOCase, ...] = ()
    """Stdio style: the rest of the ground-truth tests."""
    reference: str = ""
    """A known-correct complete solution, where the dataset ships one."""
    time_limit_s: float | None = None
    memory_limit_mb: int | None = None
    meta: dict[str, MetaValue] = {}
    """Dataset extras kept for reporting (difficulty, url, platform, ...)."""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("id must not be empty")
        if self.style == "function" and not self.tests:
            raise ValueError("a function-style problem needs at least one test")
        if self.style == "stdio" and not (self.public_cases or self.hidden_cases):
            raise ValueError("a stdio problem needs at least one case")

    @property
    def cases(self) -> tuple[IOCase, ...]:
        """All stdin/stdout ground-truth cases, public first."""
        return self.public_cases + self.hidden_cases

    def program(self, solution: str) -> str:
        """The text to run for a candidate `solution`: the prelude, if any, then the solution."""
        return f"{self.prelude}\n{solution}" if self.prelude else solution


class MathProblem(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A question with one reference answer (checked by `atgrpo.verify`)."""

    id: str
    source: str
    """Format it was loaded from: gsm8k, math, aime, atgrpo."""
    question: str
    answer: str
    """Gold final answer as text: GSM8K's number without commas, MATH's last boxed content, AIME's integer."""
    solution: str = ""
    """Worked solution where the dataset has one (never shown to the model by the loaders)."""
    meta: dict[str, MetaValue] = {}

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("id must not be empty")
        if not self.answer.strip():
            raise ValueError("answer must not be empty")


P = TypeVar("P", CodeProblem, MathProblem)


@dataclass(frozen=True)
class SkippedRecord:
    """A record a loader dropped under `on_error="skip"`: where it was and why."""

    where: str
    reason: str


@dataclass(frozen=True)
class ProblemSet(Sequence[P], Generic[P]):
    """The problems of one file, in file order, plus what was skipped. Behaves as a sequence of problems."""

    path: Path
    format: str
    problems: tuple[P, ...]
    skipped: tuple[SkippedRecord, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self) -> Iterator[P]:
        return iter(self.problems)

    @overload
    def __getitem__(self, i: int) -> P: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[P, ...]: ...
    def __getitem__(self, i: int | slice) -> P | tuple[P, ...]:
        return self.problems[i]

    def by_id(self, problem_id: str) -> P:
        for p in self.problems:
            if p.id == problem_id:
                return p
        raise KeyError(problem_id)


def encode_jsonl(problems: Sequence[CodeProblem] | Sequence[MathProblem]) -> bytes:
    """Problems as JSONL in the `atgrpo` format (one record per line; defaults omitted)."""
    enc = msgspec.json.Encoder()
    return b"".join(enc.encode(p) + b"\n" for p in problems)
