"""Run untrusted Python programs against their tests: one verdict per test, the host unharmed.

    from atgrpo.sandbox import Sandbox, humaneval_program, mbpp_program, stdio_program

    with Sandbox(workers=4, timeout_s=3.0) as sandbox:
        results = sandbox.run_batch([
            humaneval_program(prompt + completion, problem["test"], problem["entry_point"]),
            mbpp_program(code, ["assert f(1) == 2", "assert f(2) == 3"]),
            stdio_program(code, [("1 2\\n", "3\\n"), ("5 5\\n", "10\\n")]),
        ])
    results[1].verdicts      # ["passed", "wrong_answer"]
    results[1].tests[1]      # .verdict .detail .stderr_tail .stdout (bytes) .wall_s

Verdicts (`Verdict`): passed, wrong_answer, runtime_error, timeout, memory_limit, output_limit,
unsupported_value, sandbox_error, skipped. A program never raises: whatever it does ends in verdicts. Exceptions are
for the caller's mistakes (`SandboxConfigError`, `InvalidProgramError`), a closed sandbox
(`SandboxClosedError`) and a machine that cannot give the isolation asked for
(`SandboxUnavailableError`); all derive from `atgrpo.errors.AtgrpoError`.

Formats. `stdio_program`: each case runs the program as `__main__` with its own stdin; stdout is
compared in Rust with the expected text, line by line with surrounding whitespace ignored
(`expected=None` only runs it and returns stdout, e.g. for a tool agent's move-printing program).
`function_program`: the program, then `setup`, then each test snippet; a test passes when it
finishes, `AssertionError` is a wrong answer, anything else a runtime error. The program runs in a
process of its own; setup and tests run in a separate checker that sees the program's functions
and classes as stand-ins: `f(x)` sends `x` to the program and gets the result back as plain data
(None, bool, int, float, complex, str, bytes, and lists, tuples, dicts, sets of them), compared by
the checker's own `==`, so the program can neither grade itself nor return an object that claims
to be equal. A test that needs the value of anything else the program gives (an instance of its
own class, a subclass of int, a generator) gets `unsupported_value`; passing a lambda to the
program is unsupported too; calls, attribute reads and exceptions cross (as their builtin class).
The checker's builtins are its own: a program global named like a builtin (`def abs(x): ...`,
`len = ...`) is not passed to the checker, so tests see the real `abs` (the program's own code still
calls its version). Only the setup's one-line imports also run in the program's module. All tests of a program share
one start; a test that kills it (timeout, crash) costs a restart for the rest, up to `max_starts`.

Threads and ownership: `run_batch` copies the programs, releases the GIL and blocks its caller
until every result is in (input order); call it from any number of threads, or await
`run_batch_async` (the default executor of the running loop). Construction probes the machine once
(namespaces, Landlock, seccomp) and runs a self-test program; what was not available is in
`Sandbox.isolation` and is warned about (`SandboxIsolationWarning`), unless `require_namespaces`
or `require_landlock` makes it an error. Isolation details: `rust/sandbox/src/lib.rs` and docs/sandbox.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any

from pydantic import BaseModel, ConfigDict

from atgrpo import _core
from atgrpo._core import (
    InvalidProgramError,
    SandboxClosedError,
    SandboxConfigError,
    SandboxUnavailableError,
)

__all__ = [
    "InvalidProgramError",
    "Isolation",
    "Program",
    "ProgramResult",
    "Sandbox",
    "SandboxClosedError",
    "SandboxConfig",
    "SandboxConfigError",
    "SandboxIsolationWarning",
    "SandboxUnavailableError",
    "TestResult",
    "Verdict",
    "function_program",
    "humaneval_program",
    "mbpp_program",
    "stdio_program",
]

logger = logging.getLogger("atgrpo.sandbox")

Program = _core.SandboxProgram
"""A program and its tests (build one with the functions below)."""
TestResult = _core.SandboxTestResult
"""verdict: str, detail: str, stderr_tail: str, stdout: bytes, wall_s: float."""
ProgramResult = _core.SandboxResult
"""tests: list[TestResult], verdicts: list[str], passed: bool (all), starts: int, wall_s: float."""


class Verdict(StrEnum):
    """The outcome of one test (compares equal to the strings in `TestResult.verdict`)."""

    PASSED = "passed"
    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    UNSUPPORTED_VALUE = "unsupported_value"
    """A function test needed a value of the program that is not plain data (a failure)."""
    SANDBOX_ERROR = "sandbox_error"
    SKIPPED = "skipped"


class SandboxIsolationWarning(RuntimeWarning):
    """The sandbox runs with less isolation than it would like (see `Sandbox.isolation`)."""


class SandboxConfig(BaseModel):
    """Limits and switches of one sandbox; the Rust side range-checks them again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    python: str | None = None
    """Interpreter to run programs with (`None`: this process's `sys.executable`). Programs only see
    its standard library: it starts with `-I -S`, so no site-packages."""
    workers: int = 2
    """Executions at the same time."""
    timeout_s: float = 5.0
    """Wall-clock limit per test; for the first test of an interpreter start it includes the start."""
    program_timeout_s: float = 30.0
    """Wall-clock limit of a whole program (all its tests and restarts); also its CPU-time limit."""
    memory_mb: int = 1024
    """Address-space limit per process (RLIMIT_AS), MiB."""
    max_processes: int = 32
    """Processes plus threads per execution (RLIMIT_NPROC in its own user namespace)."""
    max_file_mb: int = 16
    """Largest file a program may write, MiB."""
    max_open_files: int = 256
    """File descriptors per process."""
    max_output_bytes: int = 1 << 20
    """stdout + stderr bytes per test before it is stopped with `output_limit`."""
    stderr_tail_bytes: int = 4096
    """How much of the end of stderr (the traceback) each result keeps."""
    max_starts: int = 3
    """Interpreter starts per program; tests left after the last one are `skipped`."""
    namespaces: bool = True
    """Use Linux namespaces where the kernel allows (docs/sandbox.md says what each layer adds)."""
    require_namespaces: bool = False
    """Raise `SandboxUnavailableError` instead of warning when namespaces are unavailable."""
    require_landlock: bool = False
    """Raise `SandboxUnavailableError` instead of warning when the kernel's Landlock lacks any layer
    the sandbox asks for (file fence, truncate, TCP, device ioctl, signal and abstract-socket scopes:
    Landlock ABI >= 6, Linux >= 6.12)."""
    read_paths: list[str] = []
    """Extra absolute paths programs may read; the interpreter's prefixes and system libraries are
    always readable, nothing else is (no /home, /root, /proc)."""
    tmp_root: str | None = None
    """Where private working directories are made (default: the system temp dir)."""
    unsafe_no_isolation: bool = False
    """Benchmark reference only: the same spawn and harness with no isolation at all."""
    stdio_zygote: bool = True
    """Stdio programs (e.g. printing programs) fork their harness from the worker's zygote, as
    function programs do, instead of starting an interpreter each (`False`: the old path, kept as a
    reference for the benchmark and the tests). Same isolation either way (docs/sandbox.md)."""

    def to_core_json(self) -> str:
        """The JSON the Rust side reads, with `python` and the interpreter's prefixes filled in."""
        data: dict[str, Any] = self.model_dump()
        if data["python"] is None:
            data["python"] = sys.executable
            prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
            data["read_paths"] = [*data["read_paths"], *sorted(p for p in prefixes if p and p != "/")]
        return json.dumps(data)


@dataclass(frozen=True)
class Isolation:
    """What this machine gave the sandbox (from the probe at construction)."""

    mode: str
    """"namespaces", "fallback" (no namespaces) or "none" (`unsafe_no_isolation`)."""
    per_execution_namespaces: bool
    shared_namespaces: bool
    readonly_root: bool
    landlock_abi: int
    seccomp: bool
    child_processes: bool
    capabilities_dropped: bool
    rlimits: bool
    zygote: bool
    """Function programs (and stdio programs, with `stdio_zygote`) fork from a per-worker
    interpreter started ahead inside the sandbox (false: every start spawns its interpreters, two
    per function program, where the zygote failed its self-test)."""
    stdio_zygote: bool
    """Stdio programs fork their harness from that zygote (`SandboxConfig.stdio_zygote`, and the
    stdio self-test passed); false: each stdio start spawns its own interpreter."""
    missing: tuple[str, ...]
    """Layers this machine could not give: "namespaces", "landlock" (none at all), each Landlock
    layer an older ABI lacks ("landlock_truncate" < 3, "landlock_tcp" < 4, "landlock_ioctl_dev" < 5,
    "landlock_scopes" < 6), "seccomp", "readonly_root" (empty with full isolation). Never empty
    without `warning` saying why."""
    warning: str | None
    python: str


def stdio_program(code: str, cases: Sequence[tuple[str | bytes, str | bytes | None]]) -> Program:
    """A stdin/stdout program with `(stdin, expected stdout)` cases (`None`: just run, keep stdout)."""
    return Program.stdio(code, list(cases))


def function_program(code: str, tests: Sequence[str], setup: str = "") -> Program:
    """A program, setup code run after it, and test snippets run one by one in its namespace."""
    return Program.function(code, list(tests), setup)


def humaneval_program(program: str, test: str, entry_point: str) -> Program:
    """HumanEval: `program` is prompt + completion; `test` defines `check(candidate)`. One test."""
    return Program.function(program, [f"check({entry_point})"], test)


def mbpp_program(code: str, test_list: Sequence[str], test_setup_code: str = "") -> Program:
    """MBPP: one test per assert line of `test_list`, after `test_setup_code`."""
    return Program.function(code, list(test_list), test_setup_code)


class Sandbox:
    """A pool of `workers` executions; see the module docstring."""

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any) -> None:
        if overrides:
            config = SandboxConfig(**{**(config or SandboxConfig()).model_dump(), **overrides})
        self.config = config or SandboxConfig()
        self._core = _core.Sandbox(self.config.to_core_json())
        report = json.loads(self._core.isolation_json)
        self.isolation = Isolation(**{**report, "missing": tuple(report["missing"])})
        if self.isolation.warning and not self.config.unsafe_no_isolation:
            logger.warning("sandbox isolation reduced: %s", self.isolation.warning)
            warnings.warn(self.isolation.warning, SandboxIsolationWarning, stacklevel=2)

    def run(self, program: Program) -> ProgramResult:
        """One program (a batch of one)."""
        return self.run_batch([program])[0]

    def run_batch(self, programs: Sequence[Program]) -> list[ProgramResult]:
        """Runs all programs concurrently without the GIL; results in input order."""
        return self._core.run_batch(list(programs))

    async def run_batch_async(self, programs: Sequence[Program]) -> list[ProgramResult]:
        """`run_batch` on the running loop's default executor (the loop stays free meanwhile)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.run_batch, list(programs))

    def close(self) -> None:
        """Waits for running executions and removes the working directories (idempotent)."""
        self._core.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
