"""The sandbox on the public HumanEval set: all 164 canonical solutions pass, a wrong variant of each fails.

The set is read in place from `$ATGRPO_DATASETS_DIR` (default `../shared/datasets` next to the repo).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from atgrpo.data import load_humaneval
from atgrpo.sandbox import Sandbox, SandboxIsolationWarning, humaneval_program

REPO = Path(__file__).resolve().parents[2]


def humaneval_path() -> Path:
    root = REPO / os.environ.get("ATGRPO_DATASETS_DIR", "../shared/datasets")
    return root / "humaneval" / "HumanEval.jsonl.gz"


def test_canonical_solutions_pass_and_wrong_variants_fail() -> None:
    path = humaneval_path()
    if not path.is_file():
        pytest.skip(f"HumanEval not found at {path} (set ATGRPO_DATASETS_DIR)")
    problems = load_humaneval(path)
    assert len(problems) == 164
    # Wrong variant: the canonical program runs whole, then the entry point is rebound to return None.
    wrong = "\n_atgrpo_canonical = {f}\ndef {f}(*args, **kwargs):\n    _atgrpo_canonical(*args, **kwargs)\n    return None\n"
    programs = [humaneval_program(p.program(p.reference), p.test_setup, p.entry_point) for p in problems]
    programs += [
        humaneval_program(p.program(p.reference) + wrong.format(f=p.entry_point), p.test_setup, p.entry_point)
        for p in problems
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        sandbox = Sandbox(workers=2, timeout_s=10.0, memory_mb=1024)
    try:
        results = sandbox.run_batch(programs)
    finally:
        sandbox.close()
    good, bad = results[:164], results[164:]
    failed = [(p.id, r.verdicts, r.tests[0].detail) for p, r in zip(problems, good) if not r.passed]
    assert not failed, failed
    # A check that computes with the result (abs(None - x)) raises instead of asserting: runtime_error.
    passed_wrong = [
        p.id for p, r in zip(problems, bad) if r.passed or r.verdicts[0] not in ("wrong_answer", "runtime_error")
    ]
    assert not passed_wrong, passed_wrong
