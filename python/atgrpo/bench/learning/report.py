"""The report of a learning suite: per-arm table over seeds, paired differences against the
reference arm with the separation verdict, and the equal-wall-time view; written as `results.json`
(the stored format, `results.py`), `table.md` (rendered from it alone) and `summary.json`
(numbers from `stats.py`, runs read by `runner.py`).

Quantities (fractions in the JSON, points in the table):
- final: held-out greedy success at the end of the run (`eval.json` `eval_end`);
- gain: final minus the start evaluation, the warm-started model's (`eval_end - eval_start`);
- late: the mean of the last `LATE_EVALS` evaluations after the start one (`late_mean`), a steadier
  end point than final;
- RL minutes: from the start evaluation to the last one (evaluations included, warm start not);
  tabled only when every run ran in one session on one machine (`results.one_sitting`);
- wall: the whole `atgrpo-train` process (summary.json only).
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

from atgrpo.bench.learning.results import StoredArm, StoredRun, StoredTable, dump, render
from atgrpo.bench.learning.stats import SEPARATION_Z, Summary, late_mean, paired, summarize, value_at, verdict


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


def stored(suite: str, reference: str, results: Mapping[str, Mapping[int, RunLike]], command: str) -> StoredTable:
    """The runs in the stored format (docs/results/), with where and how each ran."""
    arms = {}
    for arm, runs in results.items():
        stored_runs = {}
        for seed, r in sorted(runs.items()):
            meta = getattr(r, "meta", {}) or {}
            stored_runs[seed] = StoredRun(
                start=r.start,
                final=r.end,
                steps=r.steps,
                late=late_mean(r.curve),
                curve=[tuple(p) for p in r.curve],
                rl_min=_rl_minutes(r),
                wall_s=r.wall_s,
                **{k: meta.get(k) for k in ("cpu", "cores", "commit", "config_digest", "prompts_digest", "session")},
            )
        arms[arm] = StoredArm(stored_runs)
    return StoredTable(
        name=suite, suite=suite, reference=reference, command=command, source=f"written by `{command}`", arms=arms
    )


def report(
    suite: str,
    reference: str,
    results: Mapping[str, Mapping[int, RunLike]],
    folder: Path,
    missing: list[str] | None = None,
    overrides: list[str] | None = None,
    command: str = "",
) -> dict:
    """Write `folder/table.md` and `folder/summary.json`; return the summary (with the table text).
    `missing`: runs of the suite not finished yet ("arm seed s"), said under the table.
    `overrides`: a variant's settings (`--steps`, `--set`), said under the title so that its table
    cannot pass for the suite's own."""
    arms: dict[str, dict] = {}
    lates = {arm: {s: late_mean(r.curve) for s, r in runs.items()} for arm, runs in results.items()}
    for arm, runs in results.items():
        seeds = sorted(runs)
        final = summarize([runs[s].end for s in seeds])
        gain = summarize([runs[s].gain for s in seeds])
        wall = summarize([runs[s].wall_s / 60 for s in seeds])
        rl = summarize([_rl_minutes(runs[s]) for s in seeds])
        steps = summarize([float(runs[s].steps) for s in seeds])
        late = summarize([lates[arm][s] for s in seeds])
        arms[arm] = {
            "seeds": seeds,
            "final": _stats_json(final),
            "gain": _stats_json(gain),
            "wall_min": _stats_json(wall),
            "rl_min": _stats_json(rl),
            "steps": _stats_json(steps),
            "late": _stats_json(late),
            "per_seed": {
                s: {
                    "start": runs[s].start,
                    "final": runs[s].end,
                    "gain": runs[s].gain,
                    "steps": runs[s].steps,
                    "wall_s": runs[s].wall_s,
                    "late": lates[arm][s],
                }
                for s in seeds
            },
        }
    comparisons: dict[str, dict] = {}
    if reference in results and len(results) > 1:
        ref = results[reference]
        for arm, runs in results.items():
            if arm == reference:
                continue
            pf = paired({s: r.end for s, r in runs.items()}, {s: r.end for s, r in ref.items()})
            pg = paired({s: r.gain for s, r in runs.items()}, {s: r.gain for s, r in ref.items()})
            pl = paired(lates[arm], lates[reference])
            comparisons[arm] = {
                name: None
                if p is None
                else {
                    "seeds": list(p.seeds),
                    "diffs": list(p.diffs),
                    "mean": p.mean,
                    "sd": p.sd,
                    "separated": p.separated,
                    "verdict": verdict(p),
                }
                for name, p in (("final", pf), ("gain", pg), ("late", pl))
            }
    fastest, t, at = equal_wall_time(results)
    data = stored(suite, reference, results, command or f"atgrpo-bench learning {suite}")
    lines = [f"### `{suite}`: held-out greedy success (%), mean ± sd over seeds", ""]
    if overrides:
        lines += ["A variant of the suite, every run with: " + ", ".join(f"`{o}`" for o in overrides), ""]
    lines.append(render(data, "results.json").rstrip("\n"))
    if missing:
        lines += ["", f"Not run yet ({len(missing)}): " + ", ".join(missing) + "."]
    table = "\n".join(lines) + "\n"
    summary = {
        "suite": suite,
        "reference": reference,
        "arms": arms,
        "paired": comparisons,
        "separation_z": SEPARATION_Z,
        "equal_wall_time": {"fastest": fastest, "minutes": t, "success": at},
        "missing": list(missing or []),
        "overrides": list(overrides or []),
        "table": table,
    }
    folder.mkdir(parents=True, exist_ok=True)
    dump(data, folder / "results.json")
    (folder / "table.md").write_text(table)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


__all__ = ["equal_wall_time", "report", "stored"]
