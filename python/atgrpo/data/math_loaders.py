"""Loaders for the public math formats: GSM8K, MATH (Hendrycks, and MATH-500), AIME, plus atgrpo's own.

Gold answers are stored as text, ready for `atgrpo.verify`: GSM8K's number after `####` without thousands
commas, MATH's `answer` field or else the content of the last `\\boxed{}` of the solution (brace-matched),
AIME's integer in canonical form (`"033"` -> `"33"`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from atgrpo.data.reader import OnError, RecordProblem, load_rows, need, need_id, need_str, opt_str, scalar_meta
from atgrpo.data.records import MathProblem, ProblemSet
from atgrpo.verify.extract import last_boxed

_GROUPED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def strip_thousands(answer: str) -> str:
    """`1,234,567` -> `1234567`; text that is not a comma-grouped number is returned unchanged."""
    s = answer.strip()
    return s.replace(",", "") if _GROUPED.fullmatch(s) else s


# --- GSM8K: question, answer ("...reasoning...\n#### 42") ----------------------------------------------


def _gsm8k(rec: dict[str, Any], index: int) -> MathProblem:
    solution = need_str(rec, "answer")
    if "####" not in solution:
        raise RecordProblem("field 'answer' has no '#### <final answer>' line")
    final = strip_thousands(solution.rsplit("####", 1)[1].strip())
    if not final:
        raise RecordProblem("nothing after '####' in field 'answer'")
    return MathProblem(
        id=need_id(rec, "id") if rec.get("id") is not None else f"gsm8k/{index}",
        source="gsm8k",
        question=need_str(rec, "question"),
        answer=final,
        solution=solution.rsplit("####", 1)[0].rstrip(),
    )


def load_gsm8k(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None) -> ProblemSet:
    """GSM8K (`train.jsonl`, `test.jsonl`). Ids are `gsm8k/<row>` (row counts from 0) unless a record has
    an `id`; `solution` is the worked answer without its `####` line."""
    return load_rows(path, "gsm8k", _gsm8k, on_error=on_error, limit=limit)


# --- MATH: problem, solution, level, type  (MATH-500 adds answer, subject, unique_id) --------------------


def _math(rec: dict[str, Any], index: int) -> MathProblem:
    solution = opt_str(rec, "solution")
    answer = opt_str(rec, "answer").strip()
    if not answer:
        if not solution:
            raise RecordProblem("neither 'answer' nor 'solution' is present")
        boxed = last_boxed(solution)
        if boxed is None or not boxed.strip():
            raise RecordProblem("field 'solution' has no complete \\boxed{...} answer")
        answer = boxed.strip()
    return MathProblem(
        id=need_id(rec, "unique_id", "id")
        if any(rec.get(k) is not None for k in ("unique_id", "id"))
        else f"math/{index}",
        source="math",
        question=need_str(rec, "problem"),
        answer=answer,
        solution=solution,
        meta=scalar_meta(rec, "level", "type", "subject"),
    )


def load_hendrycks_math(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None) -> ProblemSet:
    """MATH (Hendrycks et al.; rows of problem/solution/level/type) and MATH-500 (with `answer`). The gold is
    `answer` when present, else the last `\\boxed{}` (or `\\fbox{}`) of the solution."""
    return load_rows(path, "math", _math, on_error=on_error, limit=limit)


# --- AIME: question + integer answer; column names differ between releases ---------------------------

_AIME_QUESTION = ("problem", "question", "Problem", "Question")
_AIME_ANSWER = ("answer", "Answer", "expected_answer")
_AIME_ID = ("id", "ID", "problem_id", "unique_id")


def _aime_answer(value: Any) -> str:
    if isinstance(value, bool):
        raise RecordProblem("AIME answer must be an integer")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        n = int(value)
    else:
        raise RecordProblem(f"AIME answer must be an integer, got {value!r:.40}")
    if not 0 <= n <= 999:
        raise RecordProblem(f"AIME answer {n} is outside 0..999")
    return str(n)


def _aime(rec: dict[str, Any], index: int) -> MathProblem:
    has_id = any(rec.get(k) is not None for k in _AIME_ID)
    return MathProblem(
        id=need_id(rec, *_AIME_ID) if has_id else f"aime/{index}",
        source="aime",
        question=need_str(rec, *_AIME_QUESTION),
        answer=_aime_answer(need(rec, *_AIME_ANSWER)),
        solution=opt_str(rec, "solution", "Solution"),
        meta=scalar_meta(rec, "year", "Year", "url"),
    )


def load_aime(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None) -> ProblemSet:
    """AIME sets (e.g. AIME 2024/2025 releases): question from `problem`/`question` (any case), answer from
    `answer`/`Answer` (an integer 0..999, as number or text), id from `id`/`ID`/`problem_id` or the row."""
    return load_rows(path, "aime", _aime, on_error=on_error, limit=limit)


# --- atgrpo's own format: MathProblem records as JSONL ----------------------------------------------


def _native(rec: dict[str, Any], index: int) -> MathProblem:
    rec = dict(rec)
    rec.setdefault("source", "atgrpo")
    if isinstance(rec.get("answer"), (int, float)) and not isinstance(rec.get("answer"), bool):
        rec["answer"] = str(rec["answer"])
    return msgspec.convert(rec, MathProblem)


def load_atgrpo_math(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None) -> ProblemSet:
    """`MathProblem` records as JSONL: `{"id", "question", "answer", "solution"?, "meta"?}`."""
    return load_rows(path, "atgrpo", _native, on_error=on_error, limit=limit)
