"""The orchestrator: what one AT-GRPO step is, on the learner's rank 0.

Per training step s (ALGORITHM.md, "One training step"):
1. `collect(s)`: the data cursor gives step s's env seeds (`units.step_seeds`); the hub cuts them into
   units naming the current policy versions, leases them to actors and returns when every unit's
   samples are in (admitted by the version ledger, sorted so arrival order never matters).
2. `plan(data)`: a last check of every sample (`intake.screen`: the hub has checked them, but the
   learner must never crash or train on a malformed one), advantages once over the step (the run's
   grouping), then each policy's samples packed into micro-batches and dealt out to the learner
   ranks (`packing.plan_step`). What fails the check is dropped with its whole group and counted
   (`learner/dropped_<reason>`); if packing still fails, the step trains on nothing rather than
   ending the run.
3. The trainers train (every rank, `Trainer.train`), then rank 0 publishes each policy's new weights
   through the hub (`Hub.publish`), which makes that version current. In strict on-policy mode the
   next round opens only after that, so no actor can produce a sample with an old version.

`evaluate()` is a greedy round on the held-out seeds, rolled out by the actors like any other.
The orchestrator owns no model and no optimizer; it never runs on ranks other than 0.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import msgspec
import numpy as np

from atgrpo.config import RunConfig
from atgrpo.errors import AtgrpoError
from atgrpo.learner.advantages import Advantages, step_advantages
from atgrpo.learner.hub import Hub, StepData
from atgrpo.learner.intake import screen
from atgrpo.learner.packing import RankPlan, plan_step
from atgrpo.messages import EvalSummary, Sample, UnitTimings
from atgrpo.units import EVAL_UNIT_SCALE, eval_seeds, step_seeds

log = logging.getLogger("atgrpo.orchestrator")


class Orchestrator:
    def __init__(self, cfg: RunConfig, hub: Hub, pad_ids: dict[str, int], world: int) -> None:
        self.cfg = cfg
        self.hub = hub
        self.pad_ids = pad_ids
        self.world = world
        self.dropped: Counter[str] = Counter()
        """Samples that reached `plan` but were not trained on, by reason, over the run."""

    def collect(self, step: int) -> StepData:
        """Every sample of training step `step`, from the actors."""
        ro = self.cfg.rollout
        self.hub.open_round(step, step_seeds(ro.envs_per_step, step), ro.envs_per_unit, split="train", greedy=False)
        return self.hub.wait_round(stall_timeout_s=self.cfg.transport.step_timeout_s)

    def plan(self, data: StepData) -> tuple[list[RankPlan], Advantages]:
        """Advantages of the step's samples and every rank's share of the update. Samples that fail
        the last check are removed from `data` (with their groups), so its metrics are of what trains."""
        limits = self.hub.limits
        keep, dropped = screen(data.samples, limits) if limits is not None else (list(range(len(data.samples))), Counter())
        if dropped:
            log.error("step %d: %d samples reached the learner malformed and were dropped (%s)", data.step,
                      len(data.samples) - len(keep), dict(dropped))
            self.dropped.update(dropped)
            data.samples = [data.samples[i] for i in keep]
            data.staleness = [data.staleness[i] for i in keep] if data.staleness else []
        grouping = self.cfg.rollout.grouping
        try:
            adv = step_advantages(data.samples, grouping)
            plans = self._pack(data.samples, adv.values)
        except (ValueError, OverflowError, AtgrpoError):
            # Whatever the check missed must not end the run: this step trains on nothing.
            log.exception("step %d: planning %d samples failed; the step trains on none", data.step, len(data.samples))
            self.dropped["unpackable"] += len(data.samples)
            data.samples, data.staleness = [], []
            adv = step_advantages([], grouping)
            plans = self._pack([], np.zeros(0))
        return plans, adv

    def _pack(self, samples: list[Sample], advantages: np.ndarray) -> list[RankPlan]:
        tr = self.cfg.train
        return plan_step(
            samples, advantages, policies=sorted(self.cfg.policies), pad_ids=self.pad_ids, world=self.world,
            minibatches=tr.minibatches, max_tokens=tr.micro_batch_tokens, aggregation=tr.loss_aggregation,
            share_prefix=tr.share_prefix,
        )

    def metrics(self) -> dict[str, float]:
        """`learner/dropped_<reason>` and `learner/dropped_total`: samples the last check kept from training."""
        out = {f"learner/dropped_{k}": float(v) for k, v in self.dropped.items()}
        out["learner/dropped_total"] = float(sum(self.dropped.values()))
        return out

    def evaluate(self, label: str, step: int) -> EvalSummary:
        """Greedy rollouts on the held-out seeds, done by the actors like any other round."""
        cfg = self.cfg
        t0 = time.perf_counter()
        self.hub.open_round(
            -1, eval_seeds(cfg.run.eval_seeds), cfg.rollout.envs_per_unit * EVAL_UNIT_SCALE, split="eval", greedy=True
        )
        data = self.hub.wait_round(stall_timeout_s=cfg.transport.step_timeout_s)
        envs = data.envs
        summary = EvalSummary(
            label=label,
            step=step,
            success=float(np.mean([e.success for e in envs])) if envs else float("nan"),
            episode_return=float(np.mean([e.episode_return for e in envs])) if envs else float("nan"),
            levels=len(envs),
            wall_s=time.perf_counter() - t0,
        )
        log.info("eval (%s) at step %d: success %.3f over %d held-out levels", label, step, summary.success, len(envs))
        return summary


def rollout_metrics(data: StepData) -> dict[str, float]:
    """`rollout/*` and `time/*` metrics of a collected step."""
    out: dict[str, float] = {"time/step_collect_s": data.wall_s}
    samples, envs = data.samples, data.envs
    if samples:
        out["rollout/reward_mean"] = float(np.mean([s.reward for s in samples]))
        out["rollout/reward_team_mean"] = float(np.mean([s.reward_team for s in samples]))
        out["rollout/reward_local_mean"] = float(np.mean([s.reward_local for s in samples]))
        out["rollout/response_len_mean"] = float(np.mean([len(s.response_ids) for s in samples]))
        out["rollout/truncated_frac"] = float(np.mean([s.truncated_response for s in samples]))
        out["rollout/samples"] = float(len(samples))
        for role in sorted({s.role for s in samples}):
            out[f"rollout/{role}/reward_mean"] = float(np.mean([s.reward for s in samples if s.role == role]))
        if data.staleness:
            out["rollout/staleness_mean"] = float(np.mean(data.staleness))
            out["rollout/staleness_max"] = float(np.max(data.staleness))
    if envs:
        out["rollout/success"] = float(np.mean([e.success for e in envs]))
        out["rollout/episode_return"] = float(np.mean([e.episode_return for e in envs]))
        out["rollout/turns"] = float(np.mean([e.turns for e in envs]))
    # Summed over the step's units, so over all actors.
    for name in msgspec.structs.fields(UnitTimings):
        out[f"time/actor_{name.name}"] = float(getattr(data.timings, name.name))
    return out


__all__ = ["Orchestrator", "rollout_metrics"]
