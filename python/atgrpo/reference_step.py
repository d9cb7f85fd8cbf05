"""The whole AT-GRPO step in one process, top to bottom: what the distributed system does, readable.

The learner job spreads one step over processes (hub, actors, learner ranks; `learner/job.py`).
This module runs the same step with the same parts and no transport, in the order a reader follows a
sample: roll out -> advantages -> micro-batches -> update -> new weights to the engines. It is the
reference of `atgrpo-bench e2e` and of the test that the distributed system yields the same samples,
advantages and update (`tests/system/test_reference_step.py`).

What a reader may change to experiment is in `ReferenceRun.step`; the set-up (`open_reference`) is
plumbing. Every rule (which seeds a step uses, how units are cut and seeded, the grouping, packing
and loss) is imported from where the system defines it, never restated here. One rule is the hub's
alone: a refill of a step short of informative groups (`rollout.refill_groups`, `learner.refill`)
needs more rounds than this one, so here a step trains on its own envs only.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch

from atgrpo.config import RunConfig
from atgrpo.engines.factory import open_engine, rollout_dtype, training_sampling
from atgrpo.learner.advantages import Advantages
from atgrpo.learner.backends import LearnerBackend, make_backend
from atgrpo.learner.objective import step_objective
from atgrpo.learner.packing import plan_step
from atgrpo.learner.proximal import train_policy_step
from atgrpo.learner.trainer import loss_config
from atgrpo.messages import EnvResult, Sample
from atgrpo.models.folder import load_model, load_tokenizer
from atgrpo.paths import policy_dir
from atgrpo.units import cut_units, roll_out_units, step_seeds
from atgrpo.workflows.base import PolicyHandle, Workflow
from atgrpo.workflows.factory import make_workflow


@dataclass
class StepResult:
    samples: list[Sample]
    """The step's samples in step order (as the hub hands them to the learner)."""
    envs: list[EnvResult]
    advantages: Advantages
    metrics: dict[str, float] = field(default_factory=dict)
    """`learner/<policy>/*` of each policy's last optimizer step, `advantage/*` and `time/*` of the step."""


@dataclass
class ReferenceRun:
    cfg: RunConfig
    workflow: Workflow
    policies: dict[str, PolicyHandle]
    """Policy -> rollout engine and tokenizer (the actors' side)."""
    backends: dict[str, LearnerBackend]
    """Policy -> model and optimizer (the learner's side)."""
    pad_ids: dict[str, int]
    versions: dict[str, int]
    rollout_threads: int = 1
    """torch threads while rolling out (an actor's `launch.actor_threads`)."""
    train_threads: int = 0
    """torch threads while training (0: every core, as the learner's default)."""

    def step(self, step: int) -> StepResult:
        cfg, ro, tr = self.cfg, self.cfg.rollout, self.cfg.train
        t0 = time.perf_counter()

        # 1. Roll out: the step's env seeds, cut into units that name the current versions; each unit
        #    sampled with its own seed, so the samples do not depend on who rolls it out.
        torch.set_num_threads(self.rollout_threads)
        units = cut_units(
            0,
            step,
            step_seeds(ro.envs_per_step, step),
            ro.envs_per_unit,
            split="train",
            versions=self.versions,
            greedy=False,
        )
        samples, envs, _, _ = roll_out_units(
            self.workflow, self.policies, units, training_sampling(ro), run_id=cfg.run.name, run_seed=cfg.run.seed
        )
        t1 = time.perf_counter()

        # 2. Advantages: GRPO within each group (env, agent, turn), or per env over whole episodes,
        #    of the shaped rewards; constant groups leave the step under drop_constant_groups.
        objective = step_objective(samples, cfg)
        trained, advantages = objective.trained(samples)

        # 3. Micro-batches: each policy trains only on the samples of its own roles.
        torch.set_num_threads(self.train_threads or os.cpu_count() or 1)
        (plan,) = plan_step(
            trained,
            advantages,
            policies=sorted(self.backends),
            pad_ids=self.pad_ids,
            world=1,
            minibatches=tr.minibatches,
            max_tokens=tr.micro_batch_tokens,
            aggregation=tr.loss_aggregation,
            share_prefix=tr.share_prefix,
            response_budget=ro.longest_response,
        )

        # 4. Update: one optimizer step per mini-batch (PPO clip over the mini-batch; pipelined,
        #    against the proximal policy: the learner before the step's first update).
        metrics: dict[str, float] = {}
        for p, backend in self.backends.items():
            out = train_policy_step(backend, plan.steps[p], decoupled=tr.max_staleness > 0)
            self.versions[p] += 1
            metrics.update({f"learner/{p}/{k}": v for k, v in out.items()})
            metrics[f"learner/{p}/version"] = float(self.versions[p])
        t2 = time.perf_counter()

        # 5. New weights to the engines: the next step samples from version + 1 only.
        for p, backend in self.backends.items():
            self.policies[p].engine.load_weights(self.versions[p], backend.export_weights())
        t3 = time.perf_counter()
        metrics.update(
            {"time/rollout_s": t1 - t0, "time/learner_s": t2 - t1, "time/sync_s": t3 - t2, "time/step_s": t3 - t0}
        )
        metrics.update(objective.metrics())
        return StepResult(samples, envs, objective.advantages, metrics)

    def close(self) -> None:
        self.workflow.close()


def open_reference(cfg: RunConfig) -> ReferenceRun:
    """Engines and backends on each policy's initial folder (`paths.policy_dir`, which must exist:
    the learner's `prepare_models` makes it), both at version 0."""
    torch.manual_seed(cfg.run.seed)  # as the learner job does before it builds its backends
    policies, backends, pad_ids = {}, {}, {}
    for p in sorted(cfg.policies):
        folder = policy_dir(cfg, p)
        engine, tokenizer = open_engine(
            folder, cfg.rollout, policy=p, dtype=rollout_dtype(cfg), version=0, engines_per_process=len(cfg.policies)
        )
        policies[p] = PolicyHandle(engine, tokenizer)
        model = load_model(folder, dtype="float32", device=cfg.train.device)  # fp32 masters (backends.base)
        pc = cfg.policies[p]
        backends[p] = make_backend(model, cfg.train, pc.lr, pc.weight_decay, loss_config(cfg))
        pad_ids[p] = load_tokenizer(folder).pad_token_id
    return ReferenceRun(
        cfg,
        make_workflow(cfg),
        policies,
        backends,
        pad_ids,
        {p: 0 for p in policies},
        rollout_threads=cfg.launch.actor_threads,
        train_threads=cfg.launch.learner_threads,
    )


__all__ = ["ReferenceRun", "StepResult", "open_reference"]
