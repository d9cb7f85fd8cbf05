"""End-to-end step time of the default config: three modes on two placements, and the process split.

Runs `atgrpo-train` (one learner and `launch.actors` actors, separate processes over ipc) for the
same steps in each of:

- modes: alternating (collect the whole step, then train: `train.streaming=false`), streaming
  (train each unit as it comes in, step at the end: the default under `max_staleness=0`) and
  pipelined (`max_staleness=1`: actors roll out step s+1 while the learner trains step s);
- placements: shared (every process wherever the OS puts it) and split (learner on core 0, actors
  on core 1, `launch.learner_cpus`/`actor_cpus`), which stands in for learner and actors on
  separate accelerators.

A step's time is its wall time (`time/step_s`: from the end of the previous step to the end of its
publication); busy fractions are the learner's compute (`time/learner_s`) and the actors' time not
spent waiting for work, over the wall time of the measured steps. Every mode's ratio is against alternating in the same placement. The
first step (engine start-up) is left out of every median. Every run starts from the same warm-started
model folder (made once, by the first run).

The last row keeps the earlier figure: the shared, alternating step against the same steps run by
`atgrpo.reference_step` in one process (no transport).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from atgrpo.bench.report import BenchRow
from atgrpo.cli.common import BUILT_IN
from atgrpo.config import load_config
from atgrpo.metrics import read_metrics

MODES = {
    "alternating": ["train.streaming=false", "train.max_staleness=0"],
    "streaming": ["train.streaming=true", "train.max_staleness=0"],
    "pipelined k=1": ["train.streaming=true", "train.max_staleness=1"],
}
PLACEMENTS = {
    "shared": [],
    "split": ["launch.learner_cpus=[0]", "launch.actor_cpus=[1]"],
}
TARGETS = {("split", "streaming"): 1.3, ("split", "pipelined k=1"): 1.7}
"""Speed-up over alternating asked for on split placement (issue 12)."""
ACTOR_BUSY_TARGET = 0.85
"""Actor busy fraction asked for under k=1 on split placement."""
LAUNCHERS = {"local": [], "ray": ['launch.backend="ray"']}
"""The launchers `run` compares (issue 37): the same config, processes started by this host or by Ray."""
RAY_STEP_TARGET = 0.95
"""Local step time over Ray step time asked for: Ray only places and supervises, it carries nothing."""
BUSY = ("time/actor_generate_s", "time/actor_env_s", "time/actor_sync_s")


def _overrides(out: Path, steps: int, quick: bool) -> list[str]:
    sets = [
        f'run.out_dir="{out}"',
        f"run.steps={steps}",
        "run.eval_seeds=16",
        "run.eval_every=0",
        "metrics.tensorboard=false",
        "run.checkpoint_every=0",
        f"warmstart.steps={10 if quick else 60}",
    ]
    if quick:
        sets += ["rollout.envs_per_step=8", "rollout.envs_per_unit=4"]
    return sets


def _system_run(out: Path, sets: list[str], env_extra: dict[str, str] | None = None) -> tuple[list[dict], float]:
    """Run `atgrpo-train` to the end: its training rows, and its start-up time (from the command's
    start to the end of step 1, less step 1's own time: process starts, placement, the start
    evaluation, the actors joining). `env_extra` is set in the run's environment."""
    cmd = [sys.executable, "-m", "atgrpo.cli.train", str(BUILT_IN)]  # its figures are the answer-mode demo's
    for s in sets:
        cmd += ["--set", s]
    # As a user runs it: the bench CLI pins OMP_NUM_THREADS=1 for its one-core suites, not for this one.
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a Ray run's local instance on loopback only
    env.update(env_extra or {})
    metrics = out / "metrics.jsonl"
    began = time.monotonic()
    first: float | None = None
    log = open(out / "driver.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        while proc.poll() is None:
            if first is None and metrics.exists() and '"rollout/samples"' in metrics.read_text():
                first = time.monotonic() - began
            if time.monotonic() - began > 1800:
                raise subprocess.TimeoutExpired(cmd, 1800)
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
    log.close()
    if proc.returncode != 0:
        tail = (out / "driver.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"atgrpo-train exited with {proc.returncode}: {' '.join(cmd)}\n{tail}")
    rows = [r for r in read_metrics(metrics) if "rollout/samples" in r]
    return rows, (first if first is not None else time.monotonic() - began) - rows[0]["time/step_s"]


def _in_process(sets: list[str], steps: int) -> list[float]:
    """Step times of the same steps run by the reference step (one process, no transport), on the
    model folder the system run prepared."""
    from atgrpo.reference_step import open_reference

    ref = open_reference(load_config(None, sets))
    try:
        return [ref.step(step).metrics["time/step_s"] for step in range(steps)]
    finally:
        ref.close()


def _figures(rows: list[dict], actors: int) -> dict[str, float]:
    """Over the steps after the first: the median step time, and each side's busy fraction of the
    wall time of all of them (an actor's units can span two steps' wall time under pipelining, so
    per-step fractions would not add up; the totals do). An actor is busy except when it waits for
    work (`time/actor_idle_s`, summed over actors)."""
    rows = rows[1:] or rows
    wall = sum(r["time/step_s"] for r in rows)
    return {
        "step_s": statistics.median(r["time/step_s"] for r in rows),
        "learner_busy": sum(r["time/learner_s"] for r in rows) / wall,
        "actor_busy": 1.0 - sum(r.get("time/actor_idle_s", 0.0) for r in rows) / (actors * wall),
        "actor_work_s": statistics.median(sum(r.get(k, 0.0) for k in BUSY) / actors for r in rows),
        "steps": float(len(rows)),
        "publish_s": statistics.median(r.get("time/publish_s", 0.0) for r in rows),
        "staleness_mean": statistics.median(r.get("rollout/staleness_mean", 0.0) for r in rows),
    }


def _placements() -> dict[str, list[str]]:
    if len(os.sched_getaffinity(0)) < 2:
        print("e2e: fewer than 2 cores here, split placement left out", file=sys.stderr)
        return {"shared": []}
    return PLACEMENTS


def _launchers(
    root: Path,
    steps: int,
    quick: bool,
    local: dict[str, float] | None = None,
    local_startup: float = 0.0,
    models: Path | None = None,
) -> list[BenchRow]:
    """The Ray launcher beside the local one: the default (streaming) mode on shared cores, the same
    warm-started model, a local Ray instance on this machine. Step time (Ray adds nothing per step:
    the data plane is the same ZeroMQ) and start-up time of each."""
    figures, startups = {}, {}
    if models is None:  # the warm-started model both launchers copy, made first (its start-up is not theirs)
        out = root / "launcher-model"
        out.mkdir()
        _system_run(out, [*_overrides(out, 1, quick), *MODES["streaming"]])
        models = out / "models"
    for name, extra in LAUNCHERS.items():
        if name == "local" and local is not None:
            figures[name], startups[name] = local, local_startup
            continue
        out = root / f"launcher-{name}"
        out.mkdir()
        if models is not None:
            shutil.copytree(models, out / "models")
        sets = _overrides(out, steps, quick) + MODES["streaming"] + extra
        train_rows, startups[name] = _system_run(out, sets)
        figures[name] = _figures(train_rows, load_config(None, sets).launch.actors)
    local_fig, ray_fig = figures["local"], figures["ray"]
    step = BenchRow(
        "e2e",
        "Ray launcher, streaming, shared cores: step time",
        ray_fig["step_s"],
        "s",
        "local launcher, same run",
        local_fig["step_s"],
        higher_is_better=False,
        extra=ray_fig,
        target=f">= {RAY_STEP_TARGET}x",
    )
    step.target_met = step.ratio >= RAY_STEP_TARGET
    start = BenchRow(
        "e2e",
        "Ray launcher: start-up (to step 1, less the step)",
        startups["ray"],
        "s",
        "local launcher start-up",
        startups["local"],
        higher_is_better=False,
    )
    return [step, start]


def steps_of(quick: bool) -> int:
    return 4 if quick else 8


def run(quick: bool, launchers_only: bool = False) -> list[BenchRow]:
    steps = steps_of(quick)
    rows: list[BenchRow] = []
    with tempfile.TemporaryDirectory(prefix="atgrpo-e2e-") as tmp:
        root = Path(tmp)
        models: Path | None = None
        figures: dict[tuple[str, str], dict[str, float]] = {}
        startup: dict[tuple[str, str], float] = {}
        actors = 1
        for placement, place_sets in ({} if launchers_only else _placements()).items():
            for mode, mode_sets in MODES.items():
                out = root / f"{placement}-{mode.split()[0]}"
                out.mkdir()
                sets = _overrides(out, steps, quick) + place_sets + mode_sets
                if models is not None:  # the same warm-started model for every run
                    shutil.copytree(models, out / "models")
                actors = load_config(None, sets).launch.actors
                train_rows, startup[placement, mode] = _system_run(out, sets)
                figures[placement, mode] = _figures(train_rows, actors)
                if models is None:
                    models = out / "models"
                    reference_sets, reference_rows = sets, figures[placement, mode]
        for (placement, mode), fig in figures.items():
            base = figures[placement, "alternating"]
            target = TARGETS.get((placement, mode))
            row = BenchRow(
                "e2e",
                f"{placement} cores, {mode}: step time",
                fig["step_s"],
                "s",
                f"{placement} cores, alternating",
                base["step_s"],
                higher_is_better=False,
                extra=fig,
                target=f">= {target}x" if target else "",
            )
            if target:
                row.target_met = row.ratio >= target
            rows.append(row)
        for placement in {p for p, _ in figures}:
            fig = figures[placement, "pipelined k=1"]
            busy = BenchRow(
                "e2e",
                f"{placement} cores, pipelined k=1: actor busy fraction",
                fig["actor_busy"],
                "frac",
                "fully busy actor",
                1.0,
            )
            if placement == "split":
                busy.target, busy.target_met = f">= {ACTOR_BUSY_TARGET}", fig["actor_busy"] >= ACTOR_BUSY_TARGET
            rows.append(busy)
        if launchers_only:
            return _launchers(root, steps, quick)
        rows += _launchers(root, steps, quick, figures["shared", "streaming"], startup["shared", "streaming"], models)
        ref = _in_process(reference_sets, steps)[1:] or [float("nan")]
        rows.append(
            BenchRow(
                "e2e",
                f"shared cores, alternating: step time (1 learner + {actors} actors)",
                reference_rows["step_s"],
                "s",
                "same steps in one process",
                statistics.median(ref),
                higher_is_better=False,
            )
        )
    return rows
