"""Curves of a learning suite: held-out success against steps and against minutes of RL, one colour
per arm, each seed a thin line and the mean over seeds a thick one.

The mean is taken per evaluation index (the i-th evaluation of every seed that has one), at the mean
step and minute of those evaluations: step-budget runs evaluate at the same steps on every seed, so
there it is the mean at each step; time-budget runs (`staleness`) differ in steps per seed, and the
thin lines show by how much.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

Curve = list[tuple[int, float, float]]
"""(step, minutes since the start evaluation, held-out success) of each evaluation of one run."""


def mean_curve(curves: list[Curve]) -> Curve:
    """Per evaluation index, the mean step, minute and success over the curves that reach it."""
    out: Curve = []
    for i in range(max((len(c) for c in curves), default=0)):
        points = [c[i] for c in curves if len(c) > i]
        n = len(points)
        out.append((round(sum(p[0] for p in points) / n), sum(p[1] for p in points) / n, sum(p[2] for p in points) / n))
    return out


def plot_suite(curves: Mapping[str, Mapping[int, Curve]], path: Path, title: str) -> Path:
    """`curves[arm][seed]` to a two-panel PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (arm, seeds) in enumerate(curves.items()):
        colour = colours[i % len(colours)]
        runs = [c for c in seeds.values() if c]
        for c in runs:
            steps, minutes, ok = zip(*c)
            by_step.plot(steps, ok, color=colour, alpha=0.3, linewidth=0.8)
            by_time.plot(minutes, ok, color=colour, alpha=0.3, linewidth=0.8)
        if runs:
            steps, minutes, ok = zip(*mean_curve(runs))
            label = f"{arm} (n={len(runs)})"
            by_step.plot(steps, ok, color=colour, linewidth=2, marker="o", markersize=3, label=label)
            by_time.plot(minutes, ok, color=colour, linewidth=2, marker="o", markersize=3, label=label)
    by_step.set(xlabel="training step", ylabel="held-out greedy success", title=f"{title}: per step")
    by_time.set(xlabel="minutes of RL (evaluations included)", title="per minute")
    for ax in (by_step, by_time):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["Curve", "mean_curve", "plot_suite"]
