"""Bad files and bad records: typed errors that name the file and line, or skipped and counted."""

from __future__ import annotations

import base64
import gzip
import json
import pickle
import zlib
from pathlib import Path

import pytest

from atgrpo.data import (
    DatasetFileError,
    DatasetRecordError,
    UnknownFormatError,
    load_apps,
    load_code_problems,
    load_gsm8k,
    load_humaneval,
    load_livecodebench,
    load_math_problems,
)
from atgrpo.errors import AtgrpoError

GOOD = {"question": "q", "answer": "x\n#### 4"}


def test_missing_file_and_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(DatasetFileError, match="no such file"):
        load_gsm8k(tmp_path / "absent.jsonl")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(DatasetFileError, match="unknown file type"):
        load_gsm8k(tmp_path / "data.csv")


def test_corrupt_gzip_and_bad_json_array(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DatasetFileError, match="gzip"):
        load_humaneval(tmp_path / "x.jsonl.gz")
    (tmp_path / "x.json").write_text('[{"question": "q", ')
    with pytest.raises(DatasetFileError, match="JSON array"):
        load_gsm8k(tmp_path / "x.json")


def test_bad_line_raises_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "gsm.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n{not json\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(DatasetRecordError) as info:
        load_gsm8k(path)
    assert info.value.where == f"{path}:3" and "invalid JSON" in info.value.reason
    assert isinstance(info.value, AtgrpoError) and str(path) in str(info.value)


def test_skip_counts_every_kind_of_bad_record(tmp_path: Path) -> None:
    lines = [
        json.dumps(GOOD),
        "{broken",
        json.dumps([1, 2]),
        json.dumps({"question": "q"}),  # no answer
        json.dumps({"question": 5, "answer": "#### 1"}),  # wrong type
        json.dumps({"question": "q", "answer": "no hashes"}),
        json.dumps({"question": "q", "answer": "#### 7", "id": "gsm8k/0"}),  # duplicates row 0's id
    ]
    path = tmp_path / "gsm.jsonl"
    path.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe garbage\n")
    problems = load_gsm8k(path, on_error="skip")
    assert len(problems) == 1 and problems[0].answer == "4"
    reasons = [s.reason for s in problems.skipped]
    assert [s.where for s in problems.skipped] == [f"{path}:{i}" for i in range(2, 9)]
    for reason, expected in zip(
        reasons,
        [
            "invalid JSON",
            "expected a JSON object",
            "missing field 'answer'",
            "must be a string",
            "no '#### <final answer>'",
            "duplicate id",
            "invalid JSON",
        ],
    ):
        assert expected in reason, (reason, expected)


def test_on_error_must_be_known(tmp_path: Path) -> None:
    path = tmp_path / "gsm.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    with pytest.raises(ValueError, match="on_error"):
        load_gsm8k(path, on_error="ignore")  # type: ignore[arg-type]


def test_code_records_with_wrong_shapes(tmp_path: Path) -> None:
    rows = [
        {"task_id": "H/0", "prompt": "def f():\n", "test": "assert True", "entry_point": "f"},  # no check()
        {"task_id": "H/1", "prompt": "def f():\n", "test": "def check(c): pass", "entry_point": "not valid"},
        {
            "task_id": "H/2",
            "prompt": "def f():\n",
            "test": "def check(c): pass",
            "entry_point": "f",
            "canonical_solution": "    return 1\n",
        },
    ]
    path = tmp_path / "he.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = load_humaneval(path, on_error="skip")
    assert [p.id for p in problems] == ["H/2"]
    assert "check(candidate)" in problems.skipped[0].reason and "identifier" in problems.skipped[1].reason


def test_apps_without_tests_or_with_mismatched_lists(tmp_path: Path) -> None:
    base = {"question": "q", "solutions": "", "difficulty": "interview", "url": "", "starter_code": ""}
    rows = [
        dict(base, problem_id=1, input_output=""),
        dict(base, problem_id=2, input_output=json.dumps({"inputs": ["1"], "outputs": []})),
        dict(base, problem_id=3, input_output="{oops"),
        dict(base, problem_id=4, input_output=json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})),
    ]
    path = tmp_path / "apps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = load_apps(path, on_error="skip")
    assert [p.id for p in problems] == ["4"]
    assert ["empty", "1 inputs but 0 outputs", "not valid JSON"] == [
        next(k for k in ("empty", "1 inputs but 0 outputs", "not valid JSON") if k in s.reason)
        for s in problems.skipped
    ]


class _Boom:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/atgrpo-pickle-ran"),))


def test_livecodebench_pickle_cannot_run_code(tmp_path: Path) -> None:
    marker = Path("/tmp/atgrpo-pickle-ran")
    marker.unlink(missing_ok=True)
    evil = base64.b64encode(zlib.compress(pickle.dumps(_Boom()))).decode()
    row = {
        "question_id": "q1",
        "question_content": "c",
        "public_test_cases": "[]",
        "private_test_cases": evil,
        "metadata": "{}",
    }
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetRecordError, match="only plain data"):
        load_livecodebench(path)
    assert not marker.exists()


def test_format_names_and_detection(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"foo": 1}) + "\n")
    with pytest.raises(UnknownFormatError, match="cannot tell"):
        load_math_problems(path)
    with pytest.raises(UnknownFormatError, match="unknown code format"):
        load_code_problems(path, format="leetcode")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DatasetFileError, match="no readable record"):
        load_code_problems(empty)


def test_gzip_jsonl_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "gsm.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for i in range(5):
            f.write(json.dumps({"question": f"q{i}", "answer": f"#### {i}"}) + "\n")
    assert [p.answer for p in load_gsm8k(path, limit=2)] == ["0", "1"]
    assert len(load_gsm8k(path)) == 5
