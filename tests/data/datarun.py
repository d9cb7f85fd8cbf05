"""Helpers for the loader tests. Runs trusted test code (reference solutions of shipped and public sets) with plain Python subprocesses.

This is not the sandbox: it checks that records follow the test contract in `atgrpo.data.records`
(solution, then `test_setup`, then each test, one namespace; stdio cases compared line by line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from atgrpo.data import CodeProblem, IOCase

REPO = Path(__file__).resolve().parents[2]


def datasets_root() -> Path:
    """`$ATGRPO_DATASETS_DIR`, default `../shared/datasets`; a relative path counts from the repo root."""
    root = Path(os.environ.get("ATGRPO_DATASETS_DIR", "../shared/datasets"))
    return root if root.is_absolute() else (REPO / root).resolve()


_BATCH = r"""
import contextlib, io, json, sys
jobs = json.loads(sys.stdin.read())
results = []
for job in jobs:
    ns = {"__name__": "__main__"}
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink):
            exec(compile(job["program"], "solution", "exec"), ns)
            exec(compile(job["setup"], "setup", "exec"), ns)
    except BaseException:
        results.append([False] * len(job["tests"]))
        continue
    row = []
    for test in job["tests"]:
        try:
            with contextlib.redirect_stdout(sink):
                exec(compile(test, "test", "exec"), ns)
            row.append(True)
        except BaseException:
            row.append(False)
    results.append(row)
sys.stdout.write(json.dumps(results))
"""


def run_function_tests(jobs: list[tuple[str, CodeProblem]]) -> list[list[bool]]:
    """For each (program, problem): pass/fail per test, all jobs in one interpreter."""
    payload = [{"program": p.program(prog), "setup": p.test_setup, "tests": list(p.tests)} for prog, p in jobs]
    out = subprocess.run(
        [sys.executable, "-c", _BATCH], input=json.dumps(payload), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _norm(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_stdio_case(solution: str, case: IOCase, problem: CodeProblem | None = None) -> bool:
    program = problem.program(solution) if problem is not None else solution
    out = subprocess.run(
        [sys.executable, "-I", "-c", program], input=case.input, capture_output=True, text=True, timeout=30
    )
    return out.returncode == 0 and _norm(out.stdout) == _norm(case.output)
