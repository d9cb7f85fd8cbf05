"""Statistics of a learning suite (`atgrpo-bench learning`): per-arm summaries over seeds, paired
differences against the reference arm, the separation rule, and the equal-wall-time view.

Invariants:
- sd is the sample standard deviation (ddof = 1); with one value it is NaN, never 0, so a single
  seed can never look certain.
- Arms are compared on the seeds both ran, pairwise (arm minus reference, seed by seed): the seed
  fixes the model's initialisation and the sampled levels, so pairing removes that shared variance.
- **Separation rule.** Two arms *separate* when the mean paired difference lies more than
  `SEPARATION_Z` = 2 standard errors (sd of the differences / sqrt(n)) from 0, with n >= 2 seeds.
  Otherwise they *do not separate*, and the report says so. With n = 3 this is a lenient test (a
  Student t with 2 degrees of freedom exceeds 2 about 18% of the time by chance), so "separate"
  means "worth more seeds", not "significant"; "do not separate" is the plain finding.
- Pure functions of numbers: no files, no runs (the tests feed them known values).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SEPARATION_Z = 2.0
"""Standard errors the mean paired difference must clear for two arms to separate."""


@dataclass(frozen=True)
class Summary:
    """One quantity of one arm over its seeds."""

    n: int
    mean: float
    sd: float
    """Sample sd (ddof = 1); NaN for n < 2."""
    min: float
    max: float


def summarize(values: Sequence[float]) -> Summary:
    """Mean, sample sd, min and max of `values` (at least one)."""
    if not values:
        raise ValueError("summarize needs at least one value")
    n = len(values)
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
    return Summary(n, mean, sd, min(values), max(values))


@dataclass(frozen=True)
class Paired:
    """Arm minus reference on the seeds both have."""

    seeds: tuple[int, ...]
    diffs: tuple[float, ...]
    mean: float
    sd: float
    separated: bool
    """|mean| > SEPARATION_Z * sd / sqrt(n) with n >= 2 (sd 0: any nonzero mean separates)."""


def paired(arm: Mapping[int, float], reference: Mapping[int, float]) -> Paired | None:
    """Paired differences `arm[s] - reference[s]` over the common seeds; None if there are none."""
    seeds = tuple(sorted(set(arm) & set(reference)))
    if not seeds:
        return None
    diffs = tuple(arm[s] - reference[s] for s in seeds)
    stats = summarize(diffs)
    n = len(diffs)
    separated = n >= 2 and abs(stats.mean) > SEPARATION_Z * stats.sd / math.sqrt(n)
    return Paired(seeds, diffs, stats.mean, stats.sd, separated)


def value_at(curve: Sequence[tuple[int, float, float]], minutes: float) -> float:
    """Held-out success a run had reached at `minutes` of its RL clock: its last evaluation at or
    before then (the start evaluation if none later). `curve` is (step, minutes, success) in time order."""
    if not curve:
        return math.nan
    reached = [ok for _, m, ok in curve if m <= minutes + 1e-9]
    return reached[-1] if reached else curve[0][2]


LATE_EVALS = 3
"""Evaluations that `late_mean` averages: one greedy evaluation of a small model swings by 10-20
points between neighbouring checkpoints, far more than its ~3-point binomial error, so the mean of
the last few is a steadier end point than the last one alone."""


def late_mean(curve: Sequence[tuple[int, float, float]], n: int = LATE_EVALS) -> float:
    """Mean held-out success over a run's last `n` evaluations after the start one (fewer if it had
    fewer; the start evaluation alone for a run with no RL step). `curve` is (step, minutes, success)."""
    if not curve:
        return math.nan
    later = [ok for _, _, ok in curve[1:]][-n:] or [curve[0][2]]
    return math.fsum(later) / len(later)


def pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}"


def mean_sd(s: Summary) -> str:
    return f"{pct(s.mean)} ± {pct(s.sd)}"


def verdict(p: Paired | None) -> str:
    """The plain words of the separation rule for one comparison."""
    if p is None:
        return "no common seeds"
    if len(p.seeds) < 2:
        return "one seed: cannot tell"
    return "separate" if p.separated else "do not separate"


__all__ = [
    "LATE_EVALS",
    "SEPARATION_Z",
    "Paired",
    "Summary",
    "late_mean",
    "mean_sd",
    "paired",
    "pct",
    "summarize",
    "value_at",
    "verdict",
]
