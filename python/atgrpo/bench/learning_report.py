"""The report of a learning suite: per-arm table over seeds, paired differences against the
reference arm with the separation verdict, and the equal-wall-time view; written as `table.md`
and `summary.json` (numbers from `learning_stats.py`, runs read by `learning.py`).

Quantities (fractions in the JSON, points in the table):
- final: held-out greedy success at the end of the run (`eval.json` `eval_end`);
- gain: final minus the start evaluation, the warm-started model's (`eval_end - eval_start`);
- late: the mean of the last `LATE_EVALS` evaluations after the start one (`late_mean`), a steadier
  end point than final;
- RL minutes: from the start evaluation to the last one (evaluations included, warm start not);
- wall: the whole `atgrpo-train` process.
Equal wall time: T is the mean RL minutes of the fastest arm that trains (arms with no RL step, the
prompt-only one, take no time and are left out of the choice); each arm's value is the mean over its
seeds of the success it had reached at T (`value_at`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from atgrpo.bench.learning_stats import (
    LATE_EVALS, SEPARATION_Z, Summary, late_mean, mean_sd, paired, pct, summarize, value_at, verdict,
)


class RunLike(Protocol):
    start: float
    end: float
    steps: int
    wall_s: float
    curve: list[tuple[int, float, float]]

    @property
    def gain(self) -> float: ...


def _stats_json(s: Summary) -> dict[str, float]:
    return {"n": s.n, "mean": s.mean, "sd": s.sd, "min": s.min, "max": s.max}


def _rl_minutes(r: RunLike) -> float:
    return r.curve[-1][1] if r.curve else 0.0


def equal_wall_time(results: Mapping[str, Mapping[int, RunLike]]) -> tuple[str | None, float, dict[str, float]]:
    """(fastest training arm, its mean RL minutes T, each arm's mean success at T)."""
    training = {a: runs for a, runs in results.items() if any(r.steps > 0 for r in runs.values())}
    if not training:
        return None, math.nan, {}
    mean_minutes = {a: sum(map(_rl_minutes, runs.values())) / len(runs) for a, runs in training.items()}
    fastest = min(mean_minutes, key=mean_minutes.__getitem__)
    t = mean_minutes[fastest]
    at = {a: sum(value_at(r.curve, t) for r in runs.values()) / len(runs) for a, runs in results.items()}
    return fastest, t, at


def report(suite: str, reference: str, results: Mapping[str, Mapping[int, RunLike]], folder: Path,
           missing: list[str] | None = None, overrides: list[str] | None = None) -> dict:
    """Write `folder/table.md` and `folder/summary.json`; return the summary (with the table text).
    `missing`: runs of the suite not finished yet ("arm seed s"), said under the table.
    `overrides`: a variant's settings (`--steps`, `--set`), said under the title so that its table
    cannot pass for the suite's own."""
    arms: dict[str, dict] = {}
    lates = {arm: {s: late_mean(r.curve) for s, r in runs.items()} for arm, runs in results.items()}
    lines = [
        f"### `{suite}`: held-out greedy success (%), mean ± sd over seeds",
        "",
        "| arm | seeds | final | min | max | per seed | gain | min | max | per seed | steps | RL min | wall min "
        f"| late (last {LATE_EVALS} evals) | per seed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    if overrides:
        lines[2:2] = ["A variant of the suite, every run with: " + ", ".join(f"`{o}`" for o in overrides), ""]
    for arm, runs in results.items():
        seeds = sorted(runs)
        final = summarize([runs[s].end for s in seeds])
        gain = summarize([runs[s].gain for s in seeds])
        wall = summarize([runs[s].wall_s / 60 for s in seeds])
        rl = summarize([_rl_minutes(runs[s]) for s in seeds])
        steps = summarize([float(runs[s].steps) for s in seeds])
        late = summarize([lates[arm][s] for s in seeds])
        arms[arm] = {
            "seeds": seeds, "final": _stats_json(final), "gain": _stats_json(gain), "wall_min": _stats_json(wall),
            "rl_min": _stats_json(rl), "steps": _stats_json(steps), "late": _stats_json(late),
            "per_seed": {s: {"start": runs[s].start, "final": runs[s].end, "gain": runs[s].gain, "steps": runs[s].steps,
                             "wall_s": runs[s].wall_s, "late": lates[arm][s]} for s in seeds},
        }
        lines.append(
            f"| {arm} | {len(seeds)} | {mean_sd(final)} | {pct(final.min)} | {pct(final.max)} | "
            f"{', '.join(pct(runs[s].end) for s in seeds)} | {mean_sd(gain)} | {pct(gain.min)} | {pct(gain.max)} | "
            f"{', '.join(pct(runs[s].gain) for s in seeds)} | {steps.mean:.0f} | {rl.mean:.1f} | {wall.mean:.1f} | "
            f"{mean_sd(late)} | {', '.join(pct(lates[arm][s]) for s in seeds)} |"
        )
    comparisons: dict[str, dict] = {}
    if reference in results and len(results) > 1:
        lines += [
            "",
            f"Paired differences, arm minus `{reference}` on the same seeds (points); arms separate when "
            f"|mean| > {SEPARATION_Z:g} sd/√n (n ≥ 2):",
            "",
            "| arm | seeds | final: mean ± sd | verdict | gain: mean ± sd | verdict | late: mean ± sd | verdict |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        ref = results[reference]
        for arm, runs in results.items():
            if arm == reference:
                continue
            pf = paired({s: r.end for s, r in runs.items()}, {s: r.end for s, r in ref.items()})
            pg = paired({s: r.gain for s, r in runs.items()}, {s: r.gain for s, r in ref.items()})
            pl = paired(lates[arm], lates[reference])
            comparisons[arm] = {
                name: None if p is None else {"seeds": list(p.seeds), "diffs": list(p.diffs), "mean": p.mean, "sd": p.sd,
                                              "separated": p.separated, "verdict": verdict(p)}
                for name, p in (("final", pf), ("gain", pg), ("late", pl))
            }
            if pf is None or pg is None or pl is None:
                lines.append(f"| {arm} | 0 | n/a | no common seeds | n/a | no common seeds | n/a | no common seeds |")
                continue
            lines.append(f"| {arm} | {len(pf.seeds)} | {pct(pf.mean)} ± {pct(pf.sd)} | {verdict(pf)} | "
                         f"{pct(pg.mean)} ± {pct(pg.sd)} | {verdict(pg)} | {pct(pl.mean)} ± {pct(pl.sd)} | {verdict(pl)} |")
    fastest, t, at = equal_wall_time(results)
    if fastest is not None and len(results) > 1:
        lines += ["", f"Equal wall time: success (%) each arm had reached at {t:.1f} min of RL, the mean of the fastest "
                  f"training arm (`{fastest}`): " + ", ".join(f"{a} {pct(v)}" for a, v in at.items())]
    if missing:
        lines += ["", f"Not run yet ({len(missing)}): " + ", ".join(missing) + "."]
    table = "\n".join(lines) + "\n"
    summary = {"suite": suite, "reference": reference, "arms": arms, "paired": comparisons, "separation_z": SEPARATION_Z,
               "equal_wall_time": {"fastest": fastest, "minutes": t, "success": at}, "missing": list(missing or []),
               "overrides": list(overrides or []), "table": table}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "table.md").write_text(table)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


__all__ = ["equal_wall_time", "report"]
