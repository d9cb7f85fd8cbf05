"""`atgrpo-bench sandbox`: sandboxed executions against plain `python -I -S`, measured side by side.

The reference is the same pool, launcher and harness with `unsafe_no_isolation=True`: the
interpreter is spawned the same way (clone(CLONE_VM|CLONE_VFORK), python -I -S) with no namespaces,
Landlock, seccomp, rlimits or private directory. So "overhead" is exactly what isolation costs per
execution. Rows:

- latency of one execution (a one-assert function program, one worker: two interpreters, the
  program's own process and the checker that runs the assert, on both sides), median over
  interleaved samples, with the overhead in ms (target: at most 2 ms over the reference);
- the same after this process allocated and touched 2 GB (a large actor): spawning must not copy
  the parent, so neither side should slow down (`extra.fork_exec_pass_ms` shows what a fork-based
  launcher pays for `python -I -S -c pass` in the same state);
- executions/s at concurrency 1, 2 and 4 (batches alternating between the pools, median).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings

from atgrpo.bench.report import BenchRow
from atgrpo.sandbox import Program, Sandbox, SandboxIsolationWarning, function_program

SUITE = "sandbox"
TARGET_OVERHEAD_MS = 2.0
REFERENCE = "plain python -I -S"


def _program() -> Program:
    return function_program("def f(x):\n    return x + 1\n", ["assert f(1) == 2"])


def _pool(workers: int, isolated: bool) -> Sandbox:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        return Sandbox(workers=workers, unsafe_no_isolation=not isolated)


def _latencies(isolated: Sandbox, plain: Sandbox, samples: int) -> tuple[float, float]:
    """Median seconds per execution of each pool, samples interleaved so drift hits both."""
    program = _program()
    for sb in (isolated, plain):  # warm-up: page cache, first clone stacks
        for _ in range(3):
            sb.run(program)
    times: dict[int, list[float]] = {id(isolated): [], id(plain): []}
    for _ in range(samples):
        for sb in (isolated, plain):
            start = time.perf_counter()
            result = sb.run(program)
            times[id(sb)].append(time.perf_counter() - start)
            if not result.passed:
                raise AssertionError(f"benchmark program failed: {result.tests}")
    return statistics.median(times[id(isolated)]), statistics.median(times[id(plain)])


def _throughputs(isolated: Sandbox, plain: Sandbox, batch: int, repeats: int) -> tuple[float, float]:
    """Median executions per second of each pool over `repeats` batches, alternating pools."""
    programs = [_program()] * batch
    rates: dict[int, list[float]] = {id(isolated): [], id(plain): []}
    for sb in (isolated, plain):
        sb.run_batch(programs[: sb.config.workers])
    for _ in range(repeats):
        for sb in (isolated, plain):
            start = time.perf_counter()
            results = sb.run_batch(programs)
            rates[id(sb)].append(batch / (time.perf_counter() - start))
            failed = [r.tests for r in results if not r.passed]
            if failed:
                raise AssertionError(f"benchmark program failed: {failed[0]}")
    return statistics.median(rates[id(isolated)]), statistics.median(rates[id(plain)])


def _fork_exec(samples: int) -> float:
    """Median seconds of os.fork() + exec of `python -I -S -c pass` + wait, for comparison: what a
    launcher that forks the host would pay (page-table copy grows with the host's memory)."""
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", "pass"])
            finally:
                os._exit(127)
        os.waitpid(pid, 0)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _latency_row(name: str, isolated_s: float, plain_s: float, mode: str, fork_s: float) -> BenchRow:
    overhead_ms = (isolated_s - plain_s) * 1e3
    return BenchRow(
        SUITE,
        name,
        isolated_s * 1e3,
        "ms",
        REFERENCE,
        plain_s * 1e3,
        higher_is_better=False,
        target=f"overhead <= {TARGET_OVERHEAD_MS:g} ms (was {overhead_ms:+.2f} ms)",
        target_met=overhead_ms <= TARGET_OVERHEAD_MS,
        extra={"overhead_ms": overhead_ms, "fork_exec_pass_ms": fork_s * 1e3, "isolation_" + mode: 1.0},
    )


def run(quick: bool) -> list[BenchRow]:
    samples, batch, repeats = (15, 16, 2) if quick else (101, 64, 5)
    rows = []
    with _pool(1, True) as isolated, _pool(1, False) as plain:
        mode = isolated.isolation.mode
        iso_s, plain_s = _latencies(isolated, plain, samples)
        rows.append(_latency_row("execution latency, 1 worker", iso_s, plain_s, mode, _fork_exec(samples)))
        ballast = bytearray(2 << 30)  # zero-filled, so every page is touched (2 GB resident)
        try:
            iso_s, plain_s = _latencies(isolated, plain, samples)
            fork_s = _fork_exec(samples)
        finally:
            del ballast
        rows.append(_latency_row("execution latency, parent holding 2 GB", iso_s, plain_s, mode, fork_s))
    for workers in (1, 2, 4):
        with _pool(workers, True) as isolated, _pool(workers, False) as plain:
            iso_rate, plain_rate = _throughputs(isolated, plain, batch, repeats)
        rows.append(
            BenchRow(
                SUITE,
                f"executions/s, concurrency {workers}",
                iso_rate,
                "exec/s",
                f"{REFERENCE}, concurrency {workers}",
                plain_rate,
                extra={"batch": float(batch)},
            )
        )
    return rows
