"""Problem sets for the code and math tasks, read from files the user points to. Nothing is fetched.

    from atgrpo.data import load_code_problems, load_math_problems
    humaneval = load_code_problems("HumanEval.jsonl.gz")              # format guessed from the first record
    gsm8k = load_math_problems("gsm8k/test.jsonl", format="gsm8k", on_error="skip")
    gsm8k.skipped                                                     # what was dropped, where, and why

Every loader returns a `ProblemSet` (a sequence of `CodeProblem` or `MathProblem`, plus `skipped`).
Malformed records raise `DatasetRecordError` naming file and line, or are skipped and counted with
`on_error="skip"`; unreadable files raise `DatasetFileError`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from atgrpo.data.code_loaders import (
    load_apps,
    load_atgrpo_code,
    load_codecontests,
    load_humaneval,
    load_livecodebench,
    load_mbpp,
)
from atgrpo.data.errors import DatasetError, DatasetFileError, DatasetRecordError, UnknownFormatError
from atgrpo.data.math_loaders import load_aime, load_atgrpo_math, load_gsm8k, load_hendrycks_math
from atgrpo.data.reader import OnError, first_row
from atgrpo.data.records import CodeProblem, IOCase, MathProblem, ProblemSet, SkippedRecord, encode_jsonl

CODE_FORMATS: dict[str, Callable[..., ProblemSet]] = {
    "humaneval": load_humaneval,
    "mbpp": load_mbpp,
    "apps": load_apps,
    "codecontests": load_codecontests,
    "livecodebench": load_livecodebench,
    "atgrpo": load_atgrpo_code,
}
MATH_FORMATS: dict[str, Callable[..., ProblemSet]] = {
    "gsm8k": load_gsm8k,
    "math": load_hendrycks_math,
    "aime": load_aime,
    "atgrpo": load_atgrpo_math,
}


def guess_code_format(row: dict[str, Any]) -> str | None:
    keys = set(row)
    if {"entry_point", "test", "prompt"} <= keys:
        return "humaneval"
    if "test_list" in keys:
        return "mbpp"
    if "input_output" in keys:
        return "apps"
    if "description" in keys and ({"public_tests", "private_tests"} & keys):
        return "codecontests"
    if "question_content" in keys or "public_test_cases" in keys:
        return "livecodebench"
    if {"id", "style", "prompt"} <= keys:
        return "atgrpo"
    return None


def guess_math_format(row: dict[str, Any]) -> str | None:
    keys = set(row)
    if {"question", "answer"} <= keys and isinstance(row["answer"], str) and "####" in row["answer"]:
        return "gsm8k"
    if "problem" in keys and ({"level", "type", "subject"} & keys):
        return "math"
    if {"id", "question", "answer"} <= keys:
        return "atgrpo"
    if keys & {"problem", "Problem", "question", "Question"} and keys & {"answer", "Answer"}:
        return "aime"
    return None


def _load(path: str | Path, format: str, table: dict, guess, kind: str, **kwargs: Any) -> ProblemSet:
    if format == "auto":
        row = first_row(path)
        guessed = guess(row)
        if guessed is None:
            raise UnknownFormatError(
                f"{path}: cannot tell which {kind} format this is (first record has fields "
                f"{sorted(row)[:12]}); pass format= one of {sorted(table)}"
            )
        format = guessed
    loader = table.get(format)
    if loader is None:
        raise UnknownFormatError(f"unknown {kind} format {format!r}; known: {sorted(table)} or 'auto'")
    return loader(path, **kwargs)


def load_code_problems(
    path: str | Path, format: str = "auto", *, on_error: OnError = "raise", limit: int | None = None, **options: Any
) -> ProblemSet:
    """Code problems from `path` in `format` (see `CODE_FORMATS`; "auto" guesses from the first record).
    `options` go to the format's loader (e.g. `with_generated_tests=True` for codecontests)."""
    return _load(path, format, CODE_FORMATS, guess_code_format, "code", on_error=on_error, limit=limit, **options)


def load_math_problems(
    path: str | Path, format: str = "auto", *, on_error: OnError = "raise", limit: int | None = None
) -> ProblemSet:
    """Math problems from `path` in `format` (see `MATH_FORMATS`; "auto" guesses from the first record)."""
    return _load(path, format, MATH_FORMATS, guess_math_format, "math", on_error=on_error, limit=limit)


__all__ = [
    "CODE_FORMATS",
    "MATH_FORMATS",
    "CodeProblem",
    "DatasetError",
    "DatasetFileError",
    "DatasetRecordError",
    "IOCase",
    "MathProblem",
    "ProblemSet",
    "SkippedRecord",
    "UnknownFormatError",
    "encode_jsonl",
    "guess_code_format",
    "guess_math_format",
    "load_aime",
    "load_apps",
    "load_atgrpo_code",
    "load_atgrpo_math",
    "load_code_problems",
    "load_codecontests",
    "load_gsm8k",
    "load_hendrycks_math",
    "load_humaneval",
    "load_livecodebench",
    "load_math_problems",
    "load_mbpp",
]
