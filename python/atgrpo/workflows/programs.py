"""Programs in model answers: extracting them, checking that they compile, and running a program that
prints its answer (games' tool agent in program mode, math's tool agent). The one copy of each.

Model text is never executed on the host: the host only `compile`s it; programs run in the sandbox,
and what they print is handed on as text (parsed by the caller, never evaluated). A workflow's
sandbox starts on first use (most runs never need one) and is closed by the workflow's `close()`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from atgrpo.config import RunConfig
from atgrpo.sandbox import stdio_program

if TYPE_CHECKING:
    from atgrpo.sandbox import Sandbox

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(text: str) -> str:
    """The program in a model answer: the last ```python block, else the last fenced block (an
    unclosed last fence runs to the end), else the whole text."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    if blocks:
        python = [b for lang, b in blocks if lang in ("python", "py", "python3")]
        return (python or [b for _, b in blocks])[-1].strip("\n").rstrip()
    return text.strip("\n").rstrip()


def compiles(code: str) -> bool:
    """Non-empty and valid Python syntax (compiled, never run)."""
    if not code.strip():
        return False
    try:
        compile(code, "<candidate>", "exec", dont_inherit=True)
    except Exception:  # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return False
    return True


class LazySandbox:
    """A workflow's sandbox, started on first use and closed by `close()` (idempotent)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.timeout_s = cfg.task.sandbox_timeout_s
        self._sandbox: Sandbox | None = None

    def get(self) -> "Sandbox":
        if self._sandbox is None:
            from atgrpo.sandbox import Sandbox, SandboxIsolationWarning

            t = self.timeout_s
            with warnings.catch_warnings():  # the sandbox logs reduced isolation itself
                warnings.simplefilter("ignore", SandboxIsolationWarning)
                self._sandbox = Sandbox(workers=2, timeout_s=t, program_timeout_s=max(30.0, 4 * t))
        return self._sandbox

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


@dataclass(frozen=True)
class PrintedOutput:
    """What one answer's program did when run with no input."""

    code: str
    """The extracted program."""
    verdict: str | None
    """The sandbox verdict ("passed": it ran to the end); None when it does not compile (never run)."""
    detail: str
    stdout: bytes

    @property
    def ran(self) -> bool:
        return self.verdict == "passed"

    @property
    def text(self) -> str:
        """Its standard output, decoded leniently."""
        return self.stdout.decode("utf-8", "replace")


def run_printing_programs(sandbox: LazySandbox, texts: Sequence[str]) -> list[PrintedOutput]:
    """Extract each answer's program and run those that compile, in one sandbox batch; one result per
    answer, in order. Nothing is started when no program compiles."""
    codes = [extract_code(t) for t in texts]
    ok = [i for i, c in enumerate(codes) if compiles(c)]
    runs = sandbox.get().run_batch([stdio_program(codes[i], [("", None)]) for i in ok]) if ok else []
    tests = {i: r.tests[0] for i, r in zip(ok, runs)}
    return [
        PrintedOutput(code, None, "", b"") if i not in tests else PrintedOutput(code, tests[i].verdict, tests[i].detail, tests[i].stdout)
        for i, code in enumerate(codes)
    ]


__all__ = ["LazySandbox", "PrintedOutput", "compiles", "extract_code", "run_printing_programs"]
