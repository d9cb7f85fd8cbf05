"""End-to-end step time of the default config, its split, and actor idle fraction.

Runs `atgrpo-train` (one learner and one actor, separate processes over ipc) for a few steps from the
default config with a short warm start, reads the per-step split from its metrics.jsonl, and then
runs the same steps with `atgrpo.reference_step` (one process, no transport, the same parts) on the
same model folder as the reference. ratio = in-process step time / system step time: 1.0 means the
process split and ZeroMQ cost nothing; below 1 is their overhead.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from atgrpo.bench.report import BenchRow
from atgrpo.config import load_config

SPLIT = ("time/actor_generate_s", "time/actor_env_s", "time/actor_sync_s", "time/actor_idle_s", "time/learner_s")


def _overrides(out: Path, steps: int, quick: bool) -> list[str]:
    sets = [
        f'run.out_dir="{out}"', f"run.steps={steps}", "run.eval_seeds=16", "metrics.tensorboard=false",
        "run.checkpoint_every=0", f"warmstart.steps={10 if quick else 60}",
    ]
    if quick:
        sets += ["rollout.envs_per_step=8", "rollout.envs_per_unit=4"]
    return sets


def _system_run(out: Path, steps: int, quick: bool) -> list[dict]:
    cmd = [sys.executable, "-m", "atgrpo.cli.train"]
    for s in _overrides(out, steps, quick):
        cmd += ["--set", s]
    # As a user runs it: the bench CLI pins OMP_NUM_THREADS=1 for its one-core suites, not for this one.
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    subprocess.run(cmd, check=True, timeout=1800, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "rollout/samples" in r]


def _in_process(out: Path, steps: int, quick: bool) -> list[float]:
    """Step times of the same steps run by the reference step (one process, no transport), on the
    model folder the system run prepared."""
    from atgrpo.reference_step import open_reference

    ref = open_reference(load_config(None, _overrides(out, steps, quick)))
    try:
        return [ref.step(step).metrics["time/step_s"] for step in range(steps)]
    finally:
        ref.close()


def run(quick: bool) -> list[BenchRow]:
    steps = 3 if quick else 8
    with tempfile.TemporaryDirectory(prefix="atgrpo-e2e-") as tmp:
        out = Path(tmp)
        rows = _system_run(out, steps, quick)
        # The first step includes engine start-up on the actor: leave it out of both medians.
        per_step = [r["time/step_collect_s"] + r["time/learner_s"] for r in rows][1:] or [float("nan")]
        ref = _in_process(out, steps, quick)[1:] or [float("nan")]
    # Actor timings are summed over the step's units, so over all actors: per actor, divide by their number.
    actors = load_config(None, _overrides(out, steps, quick)).launch.actors
    split = {k.removeprefix("time/"): statistics.median(r.get(k, 0.0) for r in rows[1:] or rows) for k in SPLIT}
    busy = (split["actor_generate_s"] + split["actor_env_s"] + split["actor_sync_s"]) / actors
    wall = statistics.median(per_step)
    idle_frac = max(0.0, 1.0 - busy / wall) if wall > 0 else float("nan")
    extra = {**split, "actors": float(actors), "actor_idle_fraction": idle_frac, "steps": float(len(per_step))}
    return [
        BenchRow("e2e", f"default config, step time (1 learner + {actors} actors)", wall, "s", "same steps in one process", statistics.median(ref), higher_is_better=False, extra=extra),
        BenchRow("e2e", "busy fraction of the step, per actor", 1.0 - idle_frac, "frac", "fully busy actor", 1.0, extra={}),
    ]
