"""End-to-end step time of the default config, its split, and actor idle fraction.

Runs `atgrpo-train` (one learner and one actor, separate processes over ipc) for a few steps from the
default config with a short warm start, reads the per-step split from its metrics.jsonl, and then
runs the same steps in one process with no transport (workflow and learner called directly on the
same model folder) as the reference. ratio = in-process step time / system step time: 1.0 means the
process split and ZeroMQ cost nothing; below 1 is their overhead.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
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
    import torch

    from atgrpo.engines.base import SamplingParams
    from atgrpo.engines.factory import open_engine
    from atgrpo.learner.backend import TorchBackend
    from atgrpo.learner.batching import loss_normalizer
    from atgrpo.learner.loss import LossConfig
    from atgrpo.learner.shared_prefix import microbatch_builder
    from atgrpo.learner.trainer import compute_advantages, step_seeds
    from atgrpo.messages import WorkUnit
    from atgrpo.models.folder import load_model, load_tokenizer
    from atgrpo.workflows.games import GameWorkflow, PolicyHandle

    cfg = load_config(None, _overrides(out, steps, quick))
    torch.set_num_threads(cfg.launch.learner_threads or os.cpu_count() or 1)  # every core, as the system's learner
    folder = out / "models" / "shared"
    tok = load_tokenizer(folder)
    backend = TorchBackend(load_model(folder), lr=cfg.policies["shared"].lr, weight_decay=0.01, grad_clip=1.0, loss_cfg=LossConfig())
    engine, _ = open_engine(folder, cfg.rollout, policy="shared")
    wf = GameWorkflow(cfg)
    ro = cfg.rollout
    params = SamplingParams(max_new_tokens=ro.max_new_tokens, temperature=ro.temperature, top_p=ro.top_p)
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        seeds = step_seeds(cfg, step)
        samples = []
        for lo in range(0, len(seeds), ro.envs_per_unit):
            unit = WorkUnit(lo, step, seeds[lo : lo + ro.envs_per_unit], lo, "train", {"shared": engine.version})
            samples += wf.run(unit, {"shared": PolicyHandle(engine, tok)}, params, run_id=cfg.run.name, seed=step).samples
        adv, _, _ = compute_advantages(samples, ro.grouping)
        mbs = microbatch_builder(cfg.train.share_prefix)(samples, adv, max_tokens=cfg.train.micro_batch_tokens, pad_id=tok.pad_token_id)
        backend.train_step(mbs, loss_normalizer(samples, "token_mean"))
        engine.load_weights(step + 1, backend.export_weights())
        times.append(time.perf_counter() - t0)
    return times


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
