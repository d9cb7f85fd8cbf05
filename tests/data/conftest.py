"""Fixtures for the loader tests: where the public datasets live, and a JSONL writer for synthetic files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datarun import datasets_root


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    root = datasets_root()
    if not root.is_dir():
        pytest.skip(f"public datasets not found at {root} (set ATGRPO_DATASETS_DIR)")
    return root


@pytest.fixture
def write_jsonl(tmp_path: Path):
    def write(name: str, rows: list) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    return write
