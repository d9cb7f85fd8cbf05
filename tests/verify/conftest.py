"""Shared verifiers (worker start-up costs about a second, so tests share them) and the GSM8K test split."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from atgrpo.verify import MathVerifier

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def verifier():
    with MathVerifier(workers=2) as v:
        v.start()
        yield v


@pytest.fixture(scope="session")
def slow_verifier():
    """Math-Verify for every answer (no fast path): the reference the fast path must agree with."""
    with MathVerifier(workers=2, fast_path=False) as v:
        v.start()
        yield v


@pytest.fixture(scope="session")
def gsm8k_test() -> Path:
    root = Path(os.environ.get("ATGRPO_DATASETS_DIR", "../shared/datasets"))
    root = root if root.is_absolute() else (REPO / root).resolve()
    path = root / "gsm8k" / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"GSM8K test split not found at {path} (set ATGRPO_DATASETS_DIR)")
    return path
