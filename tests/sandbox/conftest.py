"""Sandboxes shared by the tests of a module: one with namespaces (where the kernel allows) and one
forced onto the fallback path, so both code paths are exercised on every machine."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from atgrpo.sandbox import Sandbox, SandboxIsolationWarning, function_program


def make(mode: str, **overrides: object) -> Sandbox:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        return Sandbox(
            namespaces=mode == "namespaces", **{"workers": 2, "timeout_s": 1.0, "memory_mb": 256, **overrides}
        )


BOMB_TIMEOUT_S = 10.0
"""The wall limit of a pool that runs a memory bomb. Touching 256 MiB page by page took over the shared
pools' 1 s on a loaded slow machine (2026-12-02); a bomb's test is about the memory limit stopping it."""


@contextmanager
def bomb_pool(like: Sandbox, **overrides: object) -> Iterator[Sandbox]:
    """A one-worker pool on `like`'s path (namespaces or fallback) with the bomb's wall limit; closed after."""
    sb = make("namespaces" if like.config.namespaces else "fallback", workers=1, timeout_s=BOMB_TIMEOUT_S, **overrides)
    try:
        yield sb
    finally:
        sb.close()


@pytest.fixture(scope="module", params=["namespaces", "fallback"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sb = make(request.param)
    yield sb
    sb.close()


def assert_still_works(sb: Sandbox) -> None:
    """The pool runs a normal program correctly after whatever ran before."""
    r = sb.run(function_program("def f(x):\n    return x + 1\n", ["assert f(1) == 2", "assert f(1) == 3"]))
    assert r.verdicts == ["passed", "wrong_answer"], r.tests
