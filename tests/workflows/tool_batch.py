"""One batch of tool-agent programs, one of each kind, and a scripted sandbox that gives each the
verdict and output the real sandbox gives it (tests/workflows/test_tool_programs.py checks that)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import numpy as np

from atgrpo.envs import EnvPool
from atgrpo.messages import ToolPrograms

LOOP, NO_COMPILE, CRASH = "while True:\n    pass", "def broken(:", "raise ValueError('no plan')"
GARBAGE = "print('hello world')"
ILLEGAL = "print('[U, U, U, U, U, U, U]')"
"""Seven moves up on a six-row grid: parses, but some move leaves the grid."""


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


def level_answers(env_config: dict[str, Any], seed: int, split: str) -> tuple[str, str]:
    """(an optimal answer, a legal one-move answer that does not solve) for Plan-Path level `seed`."""
    pool = EnvPool("planpath", 5, **env_config)
    pool.reset(np.arange(5), [seed] * 5, split)
    plan = pool.solve([0]).plans[0]
    assert plan is not None
    moves = [f"[{m}]" for m in "UDLR"]
    res = pool.step(np.arange(1, 5), moves)
    legal = [m for m, ok, won in zip(moves, res.valid, res.success) if ok and not won]
    assert legal, f"level {seed}: no legal move that leaves it unsolved"
    return plan, legal[0]


def every_kind(env_config: dict[str, Any], seed: int, split: str = "train") -> tuple[list[str], ToolPrograms]:
    """The tool's answers on level `seed`, one of each kind, and the counts they must come out as."""
    plan, step = level_answers(env_config, seed, split)
    codes = [f"print({plan!r})", f"print({step!r})", ILLEGAL, LOOP, NO_COMPILE, GARBAGE, CRASH]
    expected = ToolPrograms(answers=7, ran=3, alone_success=1, unparseable=1, timed_out=1, crashed=1, no_compile=1)
    return [fence(c) for c in codes], expected


@dataclass
class FakeTest:
    verdict: str
    detail: str
    stdout: bytes


@dataclass
class FakeResult:
    tests: list[FakeTest]


class ScriptedSandbox:
    """Stands in for `LazySandbox` (`programs.stdio_program` patched to hand it the code itself): a
    `print` of a literal prints it, the loop times out, the raise is a runtime error."""

    def get(self) -> "ScriptedSandbox":
        return self

    def run_batch(self, codes: list[str]) -> list[FakeResult]:
        out = []
        for code in codes:
            if code == LOOP:
                test = FakeTest("timeout", "1.0 s", b"")
            elif code == CRASH:
                test = FakeTest("runtime_error", "ValueError: no plan", b"")
            else:  # print(<a literal written here>)
                literal = code.removeprefix("print(").removesuffix(")")
                test = FakeTest("passed", "", (ast.literal_eval(literal) + "\n").encode())
            out.append(FakeResult([test]))
        return out

    def close(self) -> None:
        pass
