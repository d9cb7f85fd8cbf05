"""`atgrpo-bench env`: the Rust pool against the pure-Python reference of the same rules.

Measured side by side in one process: batched `step` with text observations, `reset`, `fork`
(tree-sampling branch copies) and level generation; the issue's targets are checked on the medians.
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Any

import numpy as np

from atgrpo.bench.report import BenchRow
from atgrpo.envs import EnvPool
from atgrpo.envs.reference import as_utf8, make_episode

SUITE = "env"
STEP_TASKS: dict[str, dict[str, Any]] = {
    "planpath": {},
    "sokoban": {},
    "sudoku": {},
}
# Realistic short answers, cycled. An episode that ends anyway (goal reached, box lost) is put back
# to its start state, inside the timed loop in both implementations.
STEP_ACTIONS = {
    "planpath": ["#### [L, R]", "#### [R, L]", "#### [U, D]", "#### [D, U]"],
    "sokoban": ["#### [L]", "#### [R]", "#### [U]", "#### [D]"],
    "sudoku": ["#### [(1, 1, 1)]", "#### [(2, 2, 2)]", "#### [(1, 2, 3)]", "#### [(2, 1, 4)]"],
}
ENDLESS = {"max_steps": 1_000_000_000}


def _step_rate_rust(task: str, cfg: dict[str, Any], batch: int, calls: int, rounds: int) -> float:
    pool = EnvPool(task, batch, **cfg, **ENDLESS)
    ids = np.arange(batch)
    pool.reset(ids, np.arange(batch))
    base = pool.snapshot(ids)
    batches = [[a] * batch for a in STEP_ACTIONS[task]]
    rates = []
    for _ in range(rounds):
        pool.restore(ids, base)
        start = time.perf_counter()
        for i in range(calls):
            out = pool.step(ids, batches[i % len(batches)])
            if out.done.any():
                ended = ids[out.done]
                pool.restore(ended, [base[j] for j in ended])
        rates.append(batch * calls / (time.perf_counter() - start))
    return statistics.median(rates)


def _step_rate_python(task: str, cfg: dict[str, Any], batch: int, calls: int, rounds: int) -> float:
    full = {**cfg, **ENDLESS}
    actions = [as_utf8(a) for a in STEP_ACTIONS[task]]
    rates = []
    for _ in range(rounds):
        envs = [make_episode(task, full, seed) for seed in range(batch)]
        start = time.perf_counter()
        for i in range(calls):
            action = actions[i % len(actions)]
            for j, env in enumerate(envs):
                if env.step(action).done:
                    envs[j] = make_episode(task, full, j)
        rates.append(batch * calls / (time.perf_counter() - start))
    return statistics.median(rates)


def _step_rows(quick: bool) -> list[BenchRow]:
    rows = []
    for task, cfg in STEP_TASKS.items():
        for batch in (1, 64, 256, 1024):
            calls = max(4, (2_000 if quick else 20_000) // batch)
            rust = _step_rate_rust(task, cfg, batch, calls, 3 if quick else 7)
            py_calls = max(2, (200 if quick else 2_000) // batch)
            ref = _step_rate_python(task, cfg, min(batch, 256), py_calls, 3)
            target, met = "", None
            if batch == 256 and task in ("planpath", "sokoban"):
                target, met = ">= 1M steps/s", rust >= 1e6
            rows.append(
                BenchRow(
                    SUITE,
                    f"{task} step, batch {batch}",
                    rust,
                    "steps/s",
                    "python reference",
                    ref,
                    target=target,
                    target_met=met,
                )
            )
    return rows


def _reset_rows(quick: bool) -> list[BenchRow]:
    rows = []
    batch = 64
    for task, cfg in STEP_TASKS.items():
        pool = EnvPool(task, batch, **cfg)
        ids = np.arange(batch)
        rates = []
        for r in range(3 if quick else 7):
            start = time.perf_counter()
            pool.reset(ids, np.arange(batch) + r * batch)
            rates.append(batch / (time.perf_counter() - start))
        n_ref = 8 if quick else 32
        start = time.perf_counter()
        for seed in range(n_ref):
            make_episode(task, cfg, seed)
        ref = n_ref / (time.perf_counter() - start)
        rows.append(
            BenchRow(
                SUITE, f"{task} reset, batch {batch}", statistics.median(rates), "resets/s", "python reference", ref
            )
        )
    return rows


def _fork_rows(quick: bool) -> list[BenchRow]:
    rows = []
    pool = EnvPool("sokoban", 1024)
    pool.reset([0], [0])
    ref_env = make_episode("sokoban", {}, 0)
    n_copy = 2_000 if quick else 20_000
    start = time.perf_counter()
    for _ in range(n_copy):
        copy.deepcopy(ref_env)
    ref = n_copy / (time.perf_counter() - start)
    for k in (4, 1023):
        dsts = np.arange(1, k + 1)
        calls = max(10, (50_000 if quick else 400_000) // k)
        rates = []
        for _ in range(3 if quick else 7):
            start = time.perf_counter()
            for _ in range(calls):
                pool.fork(0, dsts)
            rates.append(k * calls / (time.perf_counter() - start))
        rust = statistics.median(rates)
        rows.append(
            BenchRow(
                SUITE,
                f"sokoban 6x6 fork, {k} branches per call",
                rust,
                "copies/s",
                "python deepcopy",
                ref,
                target=">= 1M copies/s",
                target_met=rust >= 1e6,
            )
        )
    return rows


def _generation_rows(quick: bool) -> list[BenchRow]:
    rows = []
    # min_pushes 8: reverse play alone gives a median of ~6 pushes here; ask for harder levels.
    cfg = {
        "width": 10,
        "height": 10,
        "boxes": 3,
        "reverse_steps": 300,
        "min_pushes": 8,
        "max_pushes": 60,
        "max_solver_states": 2_000_000,
    }
    n = 32 if quick else 256
    pool = EnvPool("sokoban", n, **cfg)
    start = time.perf_counter()
    pool.reset(np.arange(n), np.arange(n))
    rust_ms = (time.perf_counter() - start) / n * 1e3
    n_ref = 2 if quick else 6
    start = time.perf_counter()
    for seed in range(n_ref):
        make_episode("sokoban", cfg, seed)
    ref_ms = (time.perf_counter() - start) / n_ref * 1e3
    rows.append(
        BenchRow(
            SUITE,
            "sokoban 10x10/3 boxes generate+verify (mean)",
            rust_ms,
            "ms/level",
            "python reference",
            ref_ms,
            higher_is_better=False,
            target="< 5 ms",
            target_met=rust_ms < 5.0,
        )
    )

    n = 256 if quick else 2048
    pool = EnvPool("sudoku", n, size=9)
    start = time.perf_counter()
    pool.reset(np.arange(n), np.arange(n))
    rust_rate = n / (time.perf_counter() - start)
    n_ref = 4 if quick else 16
    start = time.perf_counter()
    for seed in range(n_ref):
        make_episode("sudoku", {"size": 9}, seed)
    ref_rate = n_ref / (time.perf_counter() - start)
    rows.append(
        BenchRow(
            SUITE,
            "sudoku 9x9 unique-solution generation",
            rust_rate,
            "puzzles/s",
            "python reference",
            ref_rate,
            target=">= 2000/s",
            target_met=rust_rate >= 2000,
        )
    )

    times = []
    ids = np.arange(n)
    for _ in range(3 if quick else 7):
        start = time.perf_counter()
        pool.solve(ids)
        times.append((time.perf_counter() - start) / n * 1e6)
    rust_us = statistics.median(times)
    ref_env = make_episode("sudoku", {"size": 9}, 0)
    start = time.perf_counter()
    for _ in range(20):
        ref_env.state.solve()
    ref_us = (time.perf_counter() - start) / 20 * 1e6
    rows.append(
        BenchRow(
            SUITE,
            "sudoku 9x9 solve via pool.solve (per puzzle)",
            rust_us,
            "us",
            "python reference",
            ref_us,
            higher_is_better=False,
            target="< 20 us",
            target_met=rust_us < 20,
        )
    )
    return rows


def run(quick: bool) -> list[BenchRow]:
    return _step_rows(quick) + _reset_rows(quick) + _fork_rows(quick) + _generation_rows(quick)
