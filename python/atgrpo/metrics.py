"""Metrics sinks (JSONL always, TensorBoard and W&B optional) and the end-of-run learning curve.

Metrics are flat, namespaced floats (`rollout/success`, `learner/shared/loss`, `hub/stale_rejected`,
`time/generate_s`); text logs go through `logging` and never here. One JSON object per line in
`metrics.jsonl`, each with `step` and `time`. Only the learner's rank 0 writes.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path


class MetricsWriter:
    def __init__(self, folder: Path, *, tensorboard: bool = True, wandb: bool = False, run_name: str = "") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "metrics.jsonl"
        self._file = open(self.path, "a", buffering=1)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(folder / "tb"))
        self._wandb = None
        if wandb:
            import wandb as wb  # optional dependency, imported only when asked for

            self._wandb = wb.init(project="atgrpo", name=run_name or folder.name, dir=str(folder))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(float(v))}
        self._file.write(json.dumps({"step": step, "time": time.time(), **clean}) + "\n")
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(clean, step=step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(path: Path) -> list[dict[str, float]]:
    """Every row of a metrics.jsonl, in file order (blank lines skipped). A line that is not a JSON
    object with a `step` is a ValueError naming the file and line: every reader (the learning curve,
    the learning suites, the benchmarks) then says which file is damaged instead of a bare parse error."""
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from exc
            if not isinstance(row, dict) or "step" not in row:
                raise ValueError(f"{path}:{number}: not a metrics row (a JSON object with a 'step')")
            rows.append(row)
    return rows


def plot_learning_curve(metrics_path: Path, png: Path, title: str = "") -> Path:
    """Training success and held-out success against step, from a metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    train = [(r["step"], r["rollout/success"]) for r in rows if "rollout/success" in r]
    evals = [(r["step"], r["eval/success"]) for r in rows if "eval/success" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    if train:
        ax.plot(*zip(*train), label="train rollouts (tree, best branch)", alpha=0.6)
    if evals:
        ax.plot(*zip(*evals), "o-", label="held-out eval (greedy)")
    ax.set_xlabel("step")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title or metrics_path.parent.name)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    return png
