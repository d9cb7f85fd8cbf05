"""The weight store's write against the step (issue 48, item 3): `atgrpo-bench e2e --store-only`.

Every actor takes its weights from `transport.weights_store` (a folder here; a shared filesystem on a
cluster). Each mode runs twice on the same warm-started model: with the store as this disk writes it,
and with every version's write made `STORE_DELAY_S` longer (`slow_store/sitecustomize.py`, a slow
NFS). The row is the step time with the slow write against the step time without it.

Rank 0 writes a version in a thread of its own (`transport/store_writer.py`), so the learner never
waits on it. What can wait is an actor that needs the version to roll out its next unit:
- pipelined (`max_staleness=1`): a unit leased while version s is still being written names the
  version before it, readable and within the bound (`learner/lease_versions.py`), so the actors roll
  out on while the write goes on; a write shorter than a step's rollout is hidden (the target: under
  10% growth);
- streaming (`max_staleness=0`, strictly on-policy): step s+1's samples must come from version s, so
  no unit of it can start before the version is readable; the write is on that path by definition, as
  a hub transfer is. The row is measured and has no target.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path

from atgrpo.bench import e2e
from atgrpo.bench.report import BenchRow
from atgrpo.config import load_config

STORE_DELAY_S = 2.0
"""The injected write time of one version (issue 48: "an injected 2 s write delay")."""
GROWTH_TARGET = 0.10
"""Step time may grow by less than this under pipelining, with the slow write."""
STORE_MODES = {m: e2e.MODES[m] for m in ("streaming", "pipelined k=1")}
SLOW_STORE = Path(__file__).parent / "slow_store"
DELAY_ENV = "ATGRPO_BENCH_STORE_WRITE_DELAY_S"


def _slow_env(delay_s: float) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(SLOW_STORE), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, DELAY_ENV: str(delay_s)}


def _store_figures(rows: list[dict], actors: int) -> dict[str, float]:
    """The step figures, and the store's own: how long a write took (the delay must show there), how
    many versions went to the store, how many weights replies the hub still served, and how many units
    named an older, readable version while a newer one was written."""
    fig = e2e._figures(rows, actors)
    measured = rows[1:] or rows
    fig["store_write_s"] = statistics.median(r.get("hub/weights_store_write_s", 0.0) for r in measured)
    fig["store_versions"] = float(rows[-1].get("hub/weights_store_versions", 0))
    fig["hub_weights_replies"] = float(rows[-1].get("transport/weights_replies", 0))
    fig["units_on_readable_version"] = float(rows[-1].get("hub/units_on_readable_version", 0))
    return fig


def run(quick: bool) -> list[BenchRow]:
    """The store's rows, from runs in a temporary folder (the first makes the warm-started model)."""
    with tempfile.TemporaryDirectory(prefix="atgrpo-e2e-store-") as tmp:
        return _rows(Path(tmp), e2e.steps_of(quick), quick)


def _rows(root: Path, steps: int, quick: bool) -> list[BenchRow]:
    models: Path | None = None
    figures: dict[tuple[str, float], dict[str, float]] = {}
    # Split cores (learner on one, actors on the other), as e2e's other targets: learner and actors on
    # separate accelerators, as on a cluster. On shared cores an actor that waits for a version frees
    # its core to the learner and later takes it back, so the write moves CPU time around instead.
    placement = e2e._placements().get("split", [])
    where = "split cores" if placement else "shared cores"
    for mode, mode_sets in STORE_MODES.items():
        for delay in (0.0, STORE_DELAY_S):
            out = root / f"store-{mode.split()[0]}-{delay:g}s"
            out.mkdir()
            if models is not None:
                shutil.copytree(models, out / "models")
            sets = [
                *e2e._overrides(out, steps, quick),
                *placement,
                *mode_sets,
                f'transport.weights_store="{out / "store"}"',
            ]
            train_rows, _ = e2e._system_run(out, sets, _slow_env(delay))
            figures[mode, delay] = _store_figures(train_rows, load_config(None, sets).launch.actors)
            if models is None:
                models = out / "models"
    rows = []
    for mode in STORE_MODES:
        slow, base = figures[mode, STORE_DELAY_S], figures[mode, 0.0]
        row = BenchRow(
            "e2e",
            f"weight store, {where}, {mode}: step time with a {STORE_DELAY_S:g} s write",
            slow["step_s"],
            "s",
            "same, the store's own write time",
            base["step_s"],
            higher_is_better=False,
            extra={**slow, **{f"base_{k}": v for k, v in base.items()}},
        )
        if mode != "streaming":  # strictly on-policy, the version is on the path (module docstring)
            row.target = f">= {1 / (1 + GROWTH_TARGET):.3f}x (step grows < {GROWTH_TARGET:.0%})"
            row.target_met = row.ratio >= 1 / (1 + GROWTH_TARGET)
        rows.append(row)
    return rows
