"""`atgrpo-bench kernels`: the Rust advantage kernel against a Python dict loop and plain numpy.

Batches look like AT-GRPO rollouts: E envs x 2 agents x 4 turns x K=4 samples per (env, agent, turn)
group, in shuffled order; rewards are a mix of continuous, binary and constant groups with a few NaNs.
Before anything is timed, all three implementations must agree (allclose), so a wrong kernel cannot
look fast. Both references follow the same rules as the kernel (singleton, constant and non-finite
rewards give 0), and each is the fastest straightforward version we could write: floats, not
`statistics.mean` (exact fractions) or per-group torch ops as in verl, and one packed int64 key for
`np.unique` rather than `axis=0`. The ratios are therefore conservative.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from atgrpo import kernels
from atgrpo.bench.report import BenchRow, median_time

SUITE = "kernels"
SIZES = (512, 4096, 16384)
AGENTS, TURNS, K = 2, 4, 4
TARGET_N = 16384
EPS = 1e-6


def make_batch(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(env, agent, turn, rewards) for n = E * AGENTS * TURNS * K samples (n a multiple of 32), shuffled."""
    rng = np.random.default_rng(seed)
    envs = n // (AGENTS * TURNS * K)
    env, agent, turn, _ = np.meshgrid(np.arange(envs), np.arange(AGENTS), np.arange(TURNS), np.arange(K), indexing="ij")
    env, agent, turn = (a.ravel().astype(np.int64) for a in (env, agent, turn))
    groups = envs * AGENTS * TURNS
    group = np.repeat(np.arange(groups), K)
    kind = rng.integers(0, 4, groups)[group]  # 0: continuous, 1: binary, 2: constant, 3: continuous
    rewards = np.where(kind == 1, rng.integers(0, 2, n).astype(np.float64), rng.normal(size=n))
    rewards = np.where(kind == 2, rng.integers(0, 2, groups)[group] * 0.1, rewards)
    rewards[rng.random(n) < 0.002] = np.nan
    order = rng.permutation(n)
    return env[order], agent[order], turn[order], rewards[order]


def dict_loop(env: np.ndarray, agent: np.ndarray, turn: np.ndarray, rewards: np.ndarray) -> list[float]:
    """The usual GRPO loop (verl `compute_grpo_outcome_advantage`): a dict of lists, then per-sample."""
    keys = list(zip(env.tolist(), agent.tolist(), turn.tolist()))
    scores = rewards.tolist()
    id2score: defaultdict[tuple[int, int, int], list[float]] = defaultdict(list)
    for key, r in zip(keys, scores):
        if math.isfinite(r):
            id2score[key].append(r)
    id2mean, id2std = {}, {}
    for key, s in id2score.items():
        mean = sum(s) / len(s)
        id2mean[key] = mean
        # 0 marks "no normalisation": singleton or constant group.
        id2std[key] = 0.0 if max(s) == min(s) else math.sqrt(sum((x - mean) ** 2 for x in s) / (len(s) - 1))
    out = []
    for key, r in zip(keys, scores):
        std = id2std.get(key, 0.0)
        out.append((r - id2mean[key]) / (std + EPS) if std > 0 and math.isfinite(r) else 0.0)
    return out


def numpy_ids(env: np.ndarray, agent: np.ndarray, turn: np.ndarray) -> tuple[np.ndarray, int]:
    packed = (env * (agent.max() + 1) + agent) * (turn.max() + 1) + turn
    uniq, inv = np.unique(packed, return_inverse=True)
    return inv, len(uniq)


def numpy_advantages(env: np.ndarray, agent: np.ndarray, turn: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """np.unique(return_inverse) + bincount, with the kernel's rules."""
    inv, g = numpy_ids(env, agent, turn)
    finite = np.isfinite(rewards)
    r = np.where(finite, rewards, 0.0)
    count = np.bincount(inv, weights=finite, minlength=g)
    mean = np.bincount(inv, weights=r, minlength=g) / np.maximum(count, 1)
    dev = np.where(finite, r - mean[inv], 0.0)
    std = np.sqrt(np.bincount(inv, weights=dev * dev, minlength=g) / np.maximum(count - 1, 1))
    hi, lo = np.full(g, -np.inf), np.full(g, np.inf)
    np.maximum.at(hi, inv[finite], r[finite])
    np.minimum.at(lo, inv[finite], r[finite])
    normalise = finite & (count[inv] >= 2) & (hi > lo)[inv]
    return np.where(normalise, dev / (std[inv] + EPS), 0.0)


def rust_advantages(env: np.ndarray, agent: np.ndarray, turn: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    return kernels.compute_advantages(env, agent, turn, rewards, eps=EPS).advantages


def check_agreement(batch: tuple[np.ndarray, ...]) -> None:
    rust = rust_advantages(*batch)
    np.testing.assert_allclose(rust, numpy_advantages(*batch), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(rust, dict_loop(*batch), rtol=1e-9, atol=1e-9)
    ids, g = kernels.group_ids(*batch[:3])
    want, want_g = numpy_ids(*batch[:3])
    # Same partition: numbered differently (first appearance vs sorted), but pairing up one to one.
    if g != want_g or len(set(zip(ids.tolist(), want.tolist()))) != g:
        raise AssertionError(f"group_ids disagrees with np.unique: {g} vs {want_g} groups")


def run(quick: bool) -> list[BenchRow]:
    """Rows per n: compute_advantages vs the dict loop and vs numpy, group_ids vs np.unique (µs)."""
    fast, slow = (5, 3) if quick else (50, 15)
    rows = []
    for n in SIZES:
        batch = make_batch(n)
        check_agreement(batch)
        inner = max(1, 4096 // n) * 10
        rust = median_time(lambda: rust_advantages(*batch), fast, inner) * 1e6
        ids = median_time(lambda: kernels.group_ids(*batch[:3]), fast, inner) * 1e6
        refs = {
            "python dict loop": median_time(lambda: dict_loop(*batch), slow) * 1e6,
            "numpy": median_time(lambda: numpy_advantages(*batch), fast) * 1e6,
        }
        ids_ref = median_time(lambda: numpy_ids(*batch[:3]), fast) * 1e6
        at_target = n == TARGET_N
        extra = {"n": float(n), "groups": float(n // K)}
        for ref_name, ref_us in refs.items():
            row = BenchRow(SUITE, f"compute_advantages n={n}", rust, "us", ref_name, ref_us, False, extra=extra)
            if at_target and ref_name == "python dict loop":
                row.target, row.target_met = ">= 50x dict loop", row.ratio >= 50
            elif at_target:
                row.target, row.target_met = "< 1 ms", rust < 1000
            rows.append(row)
        row = BenchRow(SUITE, f"group_ids n={n}", ids, "us", "numpy unique", ids_ref, False, extra=extra)
        if at_target:
            row.target, row.target_met = "< 0.3 ms", ids < 300
        rows.append(row)
    return rows
