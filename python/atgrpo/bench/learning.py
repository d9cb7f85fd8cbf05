"""Learning at equal wall time: the default demo pipelined (`max_staleness = 1`) against strict
on-policy streaming (`max_staleness = 0`), each with the same RL budget of wall-clock time.

Both runs start from the same warm-started model (made once), on split placement (learner on core
0, actors on core 1: how they would sit on separate accelerators), and evaluate held-out success
every 20 steps; evaluations count against the budget in both. Reported: held-out success at the
end of the budget and the number of steps each mode reached in it, k=1 against k=0; both curves
(against minutes and against steps) go to a PNG beside the JSON. Not part of `all`: it takes twice
the budget (10 minutes each by default, 1 with --quick).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from atgrpo.bench.report import BenchRow

BUDGET_S = 600
MODES = {"k=0 (streaming)": 0, "k=1 (pipelined)": 1}
PNG = Path("bench-results") / "learning_curves.png"


def _run(out: Path, staleness: int, budget_s: int, quick: bool) -> list[tuple[int, float, float]]:
    """(step, minutes since the RL start, held-out success) of each evaluation of one run."""
    sets = [
        f'run.out_dir="{out}"', "run.steps=100000", f"run.time_limit_s={budget_s}", "run.eval_every=20",
        "metrics.tensorboard=false", "run.checkpoint_every=0", f"train.max_staleness={staleness}",
    ]
    if len(os.sched_getaffinity(0)) >= 2:
        sets += ["launch.learner_cpus=[0]", "launch.actor_cpus=[1]"]
    if quick:
        sets += ["warmstart.steps=20", "run.eval_seeds=32"]
    cmd = [sys.executable, "-m", "atgrpo.cli.train"]
    for s in sets:
        cmd += ["--set", s]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    subprocess.run(cmd, check=True, timeout=budget_s + 1800, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r for r in rows if "eval/success" in r]
    t0 = evals[0]["time"]
    return [(int(r["step"]), (r["time"] - t0) / 60.0, float(r["eval/success"])) for r in evals]


def _plot(curves: dict[str, list[tuple[int, float, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(10, 4))
    for name, points in curves.items():
        steps, minutes, success = zip(*points)
        by_time.plot(minutes, success, marker="o", label=name)
        by_step.plot(steps, success, marker="o", label=name)
    by_time.set(xlabel="wall-clock minutes of RL", ylabel="held-out success", title="per minute")
    by_step.set(xlabel="training step", title="per step")
    for ax in (by_time, by_step):
        ax.grid(alpha=0.3)
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(quick: bool) -> list[BenchRow]:
    budget = 60 if quick else BUDGET_S
    curves: dict[str, list[tuple[int, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="atgrpo-learning-") as tmp:
        models: Path | None = None
        for name, k in MODES.items():
            out = Path(tmp) / f"k{k}"
            out.mkdir()
            if models is not None:
                shutil.copytree(models, out / "models")
            curves[name] = _run(out, k, budget, quick)
            models = models or out / "models"
    _plot(curves, PNG)
    (k0, c0), (k1, c1) = curves.items()
    extra = {f"{name} step {s} ({m:.1f} min)": ok for name, pts in curves.items() for s, m, ok in pts}
    return [
        BenchRow("learning", f"{k1}: held-out success after {budget / 60:.0f} min", c1[-1][2], "frac",
                 f"{k0}, same budget", c0[-1][2], extra=extra),
        BenchRow("learning", f"{k1}: steps in {budget / 60:.0f} min", float(c1[-1][0]), "steps",
                 f"{k0}, same budget", float(c0[-1][0])),
    ]
