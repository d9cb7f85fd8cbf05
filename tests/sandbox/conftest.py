"""Sandboxes shared by the tests of a module: one with namespaces (where the kernel allows) and one
forced onto the fallback path, so both code paths are exercised on every machine."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from atgrpo.sandbox import Sandbox, SandboxIsolationWarning, function_program


def make(mode: str, **overrides: object) -> Sandbox:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        return Sandbox(
            namespaces=mode == "namespaces", **{"workers": 2, "timeout_s": 1.0, "memory_mb": 256, **overrides}
        )


@pytest.fixture(scope="module", params=["namespaces", "fallback"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sb = make(request.param)
    yield sb
    sb.close()


def assert_still_works(sb: Sandbox) -> None:
    """The pool runs a normal program correctly after whatever ran before."""
    r = sb.run(function_program("def f(x):\n    return x + 1\n", ["assert f(1) == 2", "assert f(1) == 3"]))
    assert r.verdicts == ["passed", "wrong_answer"], r.tests
