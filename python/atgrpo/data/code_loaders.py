"""Loaders for the public code-generation formats. Each takes a file path and returns a `ProblemSet`.

Field names are the datasets' own (their HF/GitHub releases); see `envs/code/README.md` for the table.
Every loader accepts `on_error="raise" | "skip"` and `limit`; none fetches anything.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import keyword
import pickle
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec

from atgrpo.data.calltests import CALL_TEST_SETUP, JUDGE_PRELUDE, call_test
from atgrpo.data.reader import (
    OnError,
    RecordProblem,
    json_field,
    load_rows,
    need,
    need_id,
    need_str,
    opt_str,
    scalar_meta,
    str_list,
)
from atgrpo.data.records import CodeProblem, IOCase, ProblemSet


def _identifier(name: str, field: str) -> str:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise RecordProblem(f"field {field!r} is not a Python identifier: {name!r}")
    return name


# --- HumanEval: task_id, prompt, canonical_solution, test, entry_point -------------------------------


def _humaneval(rec: dict[str, Any], index: int) -> CodeProblem:
    entry = _identifier(need_str(rec, "entry_point"), "entry_point")
    prompt = need_str(rec, "prompt")
    test = need_str(rec, "test")
    if "def check(" not in test:
        raise RecordProblem("field 'test' does not define check(candidate)")
    solution = opt_str(rec, "canonical_solution")
    return CodeProblem(
        id=need_id(rec, "task_id"),
        source="humaneval",
        prompt=prompt,
        style="function",
        entry_point=entry,
        starter_code=prompt,
        test_setup=test,
        tests=(f"check({entry})",),
        reference=prompt + solution if solution else "",
    )


def load_humaneval(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None) -> ProblemSet:
    """HumanEval (`HumanEval.jsonl[.gz]`): one test per problem, `check(<entry_point>)`.
    `reference` is prompt + canonical_solution."""
    return load_rows(path, "humaneval", _humaneval, on_error=on_error, limit=limit)


# --- MBPP: original (text, code, test_list, test_setup_code, challenge_test_list) and sanitized
# (prompt, code, test_list, test_imports) ---------------------------------------------------------------

_DEF = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.M)
_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")


def _mbpp_entry(code: str, tests: list[str]) -> str:
    defined = _DEF.findall(code)
    called = _CALL.findall(tests[0])
    for name in called:
        if name in defined:
            return name
    for name in called:  # no reference code: first call that is not a builtin the asserts use
        if name not in {"set", "sorted", "list", "tuple", "abs", "round", "len", "isclose", "str", "int", "float"}:
            return name
    return ""


def _mbpp(rec: dict[str, Any], index: int, with_challenge: bool, show_tests: bool) -> CodeProblem:
    text = need_str(rec, "text", "prompt")
    tests = str_list(need(rec, "test_list"), "test_list")
    if not tests:
        raise RecordProblem("field 'test_list' is empty")
    if with_challenge and rec.get("challenge_test_list"):
        tests = tests + str_list(rec["challenge_test_list"], "challenge_test_list")
    setup = opt_str(rec, "test_setup_code")
    if rec.get("test_imports"):
        setup = "\n".join(str_list(rec["test_imports"], "test_imports") + ([setup] if setup else []))
    code = opt_str(rec, "code")
    prompt = text
    if show_tests:
        prompt = f"{text}\nYour code should pass these tests:\n" + "\n".join(tests)
    return CodeProblem(
        id=need_id(rec, "task_id"),
        source="mbpp",
        prompt=prompt,
        style="function",
        entry_point=_mbpp_entry(code, tests),
        test_setup=setup,
        tests=tuple(tests),
        reference=code,
        meta={"text": text},
    )


def load_mbpp(
    path: str | Path,
    *,
    with_challenge_tests: bool = False,
    show_tests: bool = True,
    on_error: OnError = "raise",
    limit: int | None = None,
) -> ProblemSet:
    """MBPP, original (`mbpp.jsonl`) or sanitized (`sanitized-mbpp.json`). Each assert of `test_list` is
    one test; `test_setup_code` / `test_imports` become `test_setup`. With `show_tests` (MBPP's own
    prompting convention) the prompt lists the asserts, which is how the model learns the function name."""
    return load_rows(
        path, "mbpp", lambda rec, i: _mbpp(rec, i, with_challenge_tests, show_tests), on_error=on_error, limit=limit
    )


# --- APPS: problem_id, question, solutions (JSON), input_output (JSON), difficulty, url, starter_code --


def _joined(value: Any, what: str) -> str:
    """APPS stores some stdin/stdout texts as lists of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return "\n".join(value)
    raise RecordProblem(f"{what} must be a string or a list of strings")


def _apps(rec: dict[str, Any], index: int) -> CodeProblem:
    io_spec = json_field(rec, "input_output")
    if not isinstance(io_spec, dict):
        raise RecordProblem("field 'input_output' must be a JSON object")
    inputs, outputs = io_spec.get("inputs"), io_spec.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise RecordProblem("input_output needs lists 'inputs' and 'outputs'")
    if len(inputs) != len(outputs):
        raise RecordProblem(f"input_output has {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise RecordProblem("input_output has no test cases")
    reference = ""
    if rec.get("solutions"):
        sols = json_field(rec, "solutions")
        if isinstance(sols, list) and sols and isinstance(sols[0], str):
            reference = sols[0]
    common: dict[str, Any] = dict(
        id=need_id(rec, "problem_id", "id"),
        source="apps",
        prompt=need_str(rec, "question"),
        starter_code=opt_str(rec, "starter_code"),
        prelude=JUDGE_PRELUDE,
        reference=reference,
        meta=scalar_meta(rec, "difficulty", "url"),
    )
    fn_name = io_spec.get("fn_name")
    if fn_name:
        if not isinstance(fn_name, str):
            raise RecordProblem("input_output 'fn_name' must be a string")
        name = _identifier(fn_name, "fn_name")
        tests = []
        for i, (args, want) in enumerate(zip(inputs, outputs)):
            if not isinstance(args, list):
                raise RecordProblem(f"call-based input {i} must be a list of arguments")
            tests.append(call_test(name, args, want, unwrap=True))
        return CodeProblem(style="function", entry_point=name, test_setup=CALL_TEST_SETUP, tests=tuple(tests), **common)
    cases = tuple(
        IOCase(_joined(i, f"input {k}"), _joined(o, f"output {k}")) for k, (i, o) in enumerate(zip(inputs, outputs))
    )
    return CodeProblem(style="stdio", hidden_cases=cases, **common)


def load_apps(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None) -> ProblemSet:
    """APPS (codeparrot/apps JSONL). Problems with `fn_name` become function-style (calls of the function or
    of `Solution().<fn_name>`), the rest stdin/stdout. Problems without test cases are malformed records
    (skip them with `on_error="skip"`). `reference` is the first of `solutions`."""
    return load_rows(path, "apps", _apps, on_error=on_error, limit=limit)


# --- CodeContests: name, description, public_tests / private_tests / generated_tests {input, output},
# solutions {language, solution}, time_limit {seconds, nanos}, memory_limit_bytes, difficulty, cf_* -----

_PYTHON3 = 3  # ContestProblem.Solution.Language.PYTHON3 (1 is Python 2)


def _cc_tests(rec: dict[str, Any], name: str) -> tuple[IOCase, ...]:
    t = rec.get(name)
    if t is None:
        return ()
    if not isinstance(t, dict):
        raise RecordProblem(f"field {name!r} must be an object with 'input' and 'output' lists")
    ins, outs = str_list(t.get("input", []), f"{name}.input"), str_list(t.get("output", []), f"{name}.output")
    if len(ins) != len(outs):
        raise RecordProblem(f"{name} has {len(ins)} inputs but {len(outs)} outputs")
    return tuple(IOCase(i, o) for i, o in zip(ins, outs))


def _cc_reference(rec: dict[str, Any]) -> str:
    sols = rec.get("solutions")
    if not isinstance(sols, dict):
        return ""
    langs, texts = sols.get("language") or [], sols.get("solution") or []
    for lang, text in zip(langs, texts):
        if lang in (_PYTHON3, "PYTHON3") and isinstance(text, str):
            return text
    return ""


def _codecontests(rec: dict[str, Any], index: int, with_generated: bool) -> CodeProblem:
    public = _cc_tests(rec, "public_tests")
    hidden = _cc_tests(rec, "private_tests")
    if with_generated:
        hidden += _cc_tests(rec, "generated_tests")
    if not public and not hidden:
        raise RecordProblem("no public or private tests")
    tl = rec.get("time_limit")
    time_limit = None
    if isinstance(tl, dict):
        time_limit = float(tl.get("seconds") or 0) + float(tl.get("nanos") or 0) / 1e9 or None
    mem = rec.get("memory_limit_bytes")
    return CodeProblem(
        id=need_id(rec, "name"),
        source="codecontests",
        prompt=need_str(rec, "description"),
        style="stdio",
        public_cases=public,
        hidden_cases=hidden,
        reference=_cc_reference(rec),
        time_limit_s=time_limit,
        memory_limit_mb=int(mem) // (1 << 20) if isinstance(mem, int) and mem > 0 else None,
        meta=scalar_meta(rec, "source", "difficulty", "cf_rating", "cf_tags", "cf_contest_id", "cf_index"),
    )


def load_codecontests(
    path: str | Path, *, with_generated_tests: bool = False, on_error: OnError = "raise", limit: int | None = None
) -> ProblemSet:
    """CodeContests (deepmind/code_contests rows as JSONL or parquet). Ground truth is the public tests plus
    the private ones (plus `generated_tests` when asked: many and large). `reference` is the first PYTHON3
    solution; limits come from `time_limit` and `memory_limit_bytes`."""
    return load_rows(
        path, "codecontests", lambda rec, i: _codecontests(rec, i, with_generated_tests), on_error=on_error, limit=limit
    )


# --- LiveCodeBench code_generation(_lite): question_id, question_title, question_content, platform,
# contest_id, contest_date, starter_code, difficulty, public_test_cases, private_test_cases, metadata -----


class _NoGlobals(pickle.Unpickler):
    """LCB ships private tests as base64(zlib(pickle(json text))). The pickle holds one str; refusing every
    global makes loading it unable to run code (no class, no function can be reached)."""

    def find_class(self, module: str, name: str):  # noqa: ARG002 - signature fixed by pickle
        raise RecordProblem(f"private_test_cases pickle refers to {module}.{name}; only plain data is accepted")


def _lcb_cases(rec: dict[str, Any], name: str) -> list[dict[str, Any]]:
    raw = rec.get(name)
    if raw is None or raw == "":
        return []
    if isinstance(raw, list):
        value: Any = raw
    elif isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            try:
                blob = zlib.decompress(base64.b64decode(raw.encode("ascii"), validate=True))
                text = _NoGlobals(io.BytesIO(blob)).load()
            except (binascii.Error, zlib.error, ValueError, EOFError, pickle.UnpicklingError) as e:
                raise RecordProblem(f"field {name!r} is neither JSON nor LCB's compressed encoding ({e})") from None
            if not isinstance(text, str):
                raise RecordProblem(f"field {name!r} decompresses to {type(text).__name__}, not JSON text")
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise RecordProblem(f"field {name!r} decompresses to invalid JSON ({e})") from None
    else:
        raise RecordProblem(f"field {name!r} must be a JSON string or a list")
    if not isinstance(value, list):
        raise RecordProblem(f"field {name!r} must hold a list of test cases")
    for i, t in enumerate(value):
        if not (isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)):
            raise RecordProblem(f"{name}[{i}] needs string 'input' and 'output'")
        if t.get("testtype", "stdin") not in ("stdin", "functional"):
            raise RecordProblem(f"{name}[{i}] has unknown testtype {t.get('testtype')!r}")
    return value


def _lcb_call(name: str, case: dict[str, Any], where: str) -> str:
    try:
        args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
        want = json.loads(case["output"])
    except json.JSONDecodeError as e:
        raise RecordProblem(f"{where}: functional test is not JSON lines ({e})") from None
    return call_test(name, args, want)


def _livecodebench(rec: dict[str, Any], index: int) -> CodeProblem:
    public = _lcb_cases(rec, "public_test_cases")
    private = _lcb_cases(rec, "private_test_cases")
    if not public and not private:
        raise RecordProblem("no public or private test cases")
    kinds = {t.get("testtype", "stdin") for t in public + private}
    if len(kinds) > 1:
        raise RecordProblem("mixes stdin and functional test cases")
    common: dict[str, Any] = dict(
        id=need_id(rec, "question_id"),
        source="livecodebench",
        prompt=need_str(rec, "question_content"),
        starter_code=opt_str(rec, "starter_code"),
        prelude=JUDGE_PRELUDE,
        meta=scalar_meta(rec, "question_title", "platform", "contest_id", "contest_date", "difficulty"),
    )
    if kinds == {"functional"}:
        meta = json_field(rec, "metadata") if rec.get("metadata") else {}
        fn = meta.get("func_name") if isinstance(meta, dict) else None
        if not isinstance(fn, str):
            raise RecordProblem("functional tests need metadata.func_name")
        name = _identifier(fn, "metadata.func_name")
        tests = [_lcb_call(name, t, f"public_test_cases[{i}]") for i, t in enumerate(public)]
        tests += [_lcb_call(name, t, f"private_test_cases[{i}]") for i, t in enumerate(private)]
        return CodeProblem(style="function", entry_point=name, test_setup=CALL_TEST_SETUP, tests=tuple(tests), **common)
    return CodeProblem(
        style="stdio",
        public_cases=tuple(IOCase(t["input"], t["output"]) for t in public),
        hidden_cases=tuple(IOCase(t["input"], t["output"]) for t in private),
        **common,
    )


def load_livecodebench(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None) -> ProblemSet:
    """LiveCodeBench code generation (`test*.jsonl` of code_generation_lite). `stdin` tests become stdio
    cases (public / hidden as the dataset splits them); `functional` (LeetCode) tests become calls of
    `Solution().<metadata.func_name>` with newline-separated JSON arguments. Private tests may be plain JSON
    or LCB's base64+zlib+pickle encoding, which is decoded without allowing any object but plain data."""
    return load_rows(path, "livecodebench", _livecodebench, on_error=on_error, limit=limit)


# --- atgrpo's own format: CodeProblem records as JSONL ----------------------------------------------


def _native(rec: dict[str, Any], index: int) -> CodeProblem:
    rec = dict(rec)
    rec.setdefault("source", "atgrpo")
    return msgspec.convert(rec, CodeProblem)


def load_atgrpo_code(path: str | Path, *, on_error: OnError = "raise", limit: int | None = None) -> ProblemSet:
    """`CodeProblem` records as JSONL (the task pack's own sets; `records.encode_jsonl` writes them)."""
    return load_rows(path, "atgrpo", _native, on_error=on_error, limit=limit)
