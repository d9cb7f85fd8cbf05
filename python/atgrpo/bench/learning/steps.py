"""`atgrpo-bench learning steps RUN_DIR ...`: where a run's step time went, from its metrics.jsonl.

For each run folder: the RL steps it made and, over the steps after the first (the first pays for the
engine's start), the median step time and the median of each phase the learner logs for a step:
the actors' generation, the learner's update and the actors' wait for it. Printed as a table,
written as JSON with `--json`. docs/lora.md compares the LoRA and full-model recipes with it on
run folders committed under docs/results/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from atgrpo.metrics import read_metrics

PHASES = {
    "step_s": "time/step_s",
    "generate_s": "time/actor_generate_s",
    "learner_s": "time/learner_s",
    "actor_idle_s": "time/actor_idle_s",
}
"""Column name -> the metrics.jsonl key it is the median of."""


def step_times(run: Path) -> dict[str, float]:
    """The RL steps of the run in `run` and the median of each phase over the steps after the first.
    A resumed run's file can repeat steps; the last row of each step counts, as in the tables."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run}: no metrics.jsonl (not a run folder)")
    rows: dict[int, dict] = {}
    for row in read_metrics(path):
        if "rollout/samples" in row and "time/step_s" in row:  # a training step's row, not an evaluation's
            rows[int(row["step"])] = row
    if not rows:
        raise ValueError(f"{path}: no training step logged")
    timed = [rows[s] for s in sorted(rows)][1:] or list(rows.values())
    out = {"steps": float(len(rows))}
    for name, key in PHASES.items():
        values = [r[key] for r in timed if key in r]
        out[name] = statistics.median(values) if values else float("nan")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="atgrpo-bench learning steps", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (each with its metrics.jsonl)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        figures = {str(run): step_times(run) for run in args.runs}
    except (OSError, ValueError) as exc:
        print(f"atgrpo-bench learning steps: {exc}", file=sys.stderr)
        return 1
    print("| run | steps | " + " | ".join(f"median {c}" for c in PHASES) + " |")
    print("| --- | --- |" + " --- |" * len(PHASES))
    for run, f in figures.items():
        print(f"| {run} | {f['steps']:.0f} | " + " | ".join(f"{f[c]:.1f}" for c in PHASES) + " |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0
