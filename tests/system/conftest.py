"""Fixtures of the system tests: a per-test process tracker, a watchdog, and one reference run
shared by several test modules (see `reference_run`).
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Iterator

import pytest
from systest_util import REFERENCE_STEPS, Processes, Run, run_train, tiny_sets

WATCHDOG_S = 600.0 if os.environ.get("PYTEST_XDIST_WORKER") else 300.0
"""A hung test's limit; twice as long on a pytest-xdist worker, which shares the cores with another."""


@pytest.fixture
def processes() -> Iterator[Processes]:
    procs = Processes()
    yield procs
    procs.cleanup()


@pytest.fixture(autouse=True)
def _watchdog() -> Iterator[None]:
    """Last resort: dump every stack and exit if a test hangs despite the per-call timeouts."""
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One clean tiny run of REFERENCE_STEPS steps with a checkpoint every 2 steps.

    Shared by the CLI smoke test (files, exit code), the actor-death test (samples and rewards of a
    run that lost an actor must be identical) and the resume test (the uninterrupted run).
    """
    out = tmp_path_factory.mktemp("reference")
    run = run_train(out, tiny_sets(out, run__steps=REFERENCE_STEPS, run__checkpoint_every=2))
    assert run.returncode == 0, run.output[-4000:]
    return run
