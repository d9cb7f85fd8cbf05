"""The orchestrator: what one AT-GRPO step is, on the learner's rank 0.

Per training step s (ALGORITHM.md, "One training step"), `step_plans(s)` yields what the ranks
train on, in order:
1. The rounds of steps s..s+k are open on the hub (k = `train.max_staleness`; k = 0: only step
   s, opened after the previous step's weights were published). The data cursor gives each step's
   env seeds (`units.step_seeds`); the hub cuts them into units, leases them to actors and names the
   versions current at lease time.
2. Streaming (`train.streaming`, the default): whenever units of step s are in, their samples get a
   last check (`intake.screen`: the hub has checked them, but the learner must never crash or train
   on a malformed one; a sample more than k versions old is dropped with its env), their advantages
   (a group lies inside one env, so inside one unit: a committed unit's groups are complete) and are
   packed into micro-batches dealt out to the ranks, which accumulate gradients
   (`packing.plan_chunk`). When the step's last unit is in, the final plan carries each policy's
   step-wide loss normalizer and the ranks take their optimizer steps (`packing.plan_finish`). A
   unit whose actor dies was never committed, so nothing of it was trained; its re-run is.
   Without streaming: the whole step is collected, then planned at once (`packing.plan_step`).
   Either way, what trains is `objective.step_objective`'s: shaped advantages, and without the
   constant groups under `rollout.drop_constant_groups`; with `rollout.refill_groups` a step short
   of informative groups gets refill rounds of further envs before its update (`learner.refill`).
3. The job publishes each policy's new weights through the hub (`Hub.publish`), which makes that
   version current for every unit leased from then on.

What fails the last check is dropped with its whole group and counted (`learner/dropped_<reason>`);
if packing still fails, that part trains on nothing rather than ending the run.

`evaluate()` is a greedy round on the held-out seeds, rolled out by the actors like any other (its
units go before any training unit). The orchestrator owns no model and no optimizer; it never runs
on ranks other than 0.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator

import msgspec
import numpy as np

from atgrpo.config import RunConfig
from atgrpo.errors import AtgrpoError
from atgrpo.learner.hub import CommittedUnit, Hub, StepData
from atgrpo.learner.intake import screen
from atgrpo.learner.objective import StepObjective, step_objective
from atgrpo.learner.packing import RankPlan, plan_chunk, plan_finish, plan_step
from atgrpo.learner.refill import Refill
from atgrpo.messages import EvalSummary, Sample, UnitTimings
from atgrpo.units import EVAL_UNIT_SCALE, eval_seeds, refill_seeds, step_seeds

log = logging.getLogger("atgrpo.orchestrator")


class Orchestrator:
    def __init__(
        self, cfg: RunConfig, hub: Hub, pad_ids: dict[str, int], world: int, restored: list[CommittedUnit] | None = None
    ) -> None:
        self.cfg = cfg
        self.hub = hub
        self.pad_ids = pad_ids
        self.world = world
        self.dropped: Counter[str] = Counter()
        """Samples that reached `plan` but were not trained on, by reason, over the run."""
        self.streaming = cfg.train.streaming and cfg.train.minibatches == 1
        self.restored = list(restored or [])
        """Units committed before a restart (from the checkpoint), handed back to their rounds."""
        self._rounds: dict[int, int] = {}
        """Training step -> its open hub round."""
        self.last: tuple[StepData, StepObjective] | None = None
        """The step `step_plans` last finished: what it trained on, and its objective."""
        self.refill: Refill = Refill.of(cfg)
        """The refill account of the step last collected (`learner.refill`)."""

    def open_rounds(self, step: int) -> None:
        """Open the rounds of steps `step`..`step + max_staleness` not open yet (within the run)."""
        ro = self.cfg.rollout
        for s in range(step, min(step + self.cfg.train.max_staleness, self.cfg.run.steps - 1) + 1):
            if s not in self._rounds:
                self._rounds[s] = self.hub.open_round(
                    s,
                    step_seeds(ro.envs_per_step, s),
                    ro.envs_per_unit,
                    split="train",
                    greedy=False,
                    restored=self.restored,
                )

    def collect(self, step: int) -> StepData:
        """Every sample of training step `step`, from the actors, refills included."""
        self.open_rounds(step)
        tp = self.cfg.transport
        start = time.monotonic()
        self.refill = refill = Refill.of(self.cfg)
        parts: list[StepData] = []
        round_id: int | None = self._rounds.pop(step)
        while round_id is not None:
            part = self.hub.wait_round(round_id, stall_timeout_s=tp.step_timeout_s, round_timeout_s=tp.round_timeout_s)
            if refill.target:  # counted on what will train: the last check first (plan's then finds nothing)
                self._check(part)
                refill.informative += step_objective(part.samples, self.cfg).advantages.informative_groups
            parts.append(part)
            round_id = self._refill_round(step, refill)
        return parts[0] if len(parts) == 1 else StepData.merge(step, parts, time.monotonic() - start)

    def _refill_round(self, step: int, refill: Refill) -> int | None:
        """Open the step's next refill round if it needs one (`learner.refill`); its id, or None."""
        n = refill.next_envs()
        if not n:
            if refill.target and refill.informative < refill.target:
                log.info(
                    "step %d: %d informative groups of %d wanted; the refill cap of %d envs is spent",
                    step,
                    refill.informative,
                    refill.target,
                    refill.cap,
                )
            return None
        ro = self.cfg.rollout
        round_id = self.hub.open_round(
            step,
            refill_seeds(step, refill.spent, n, refill.cap),
            ro.envs_per_unit,
            split="train",
            greedy=False,
            first_env=ro.envs_per_step + refill.spent,
        )
        refill.opened(n)
        return round_id

    def step_plans(self, step: int) -> Iterator[list[RankPlan]]:
        """Every rank's plans of training step `step`, in the order they are trained; the last one
        is final (the optimizers step). Sets `last` before yielding it."""
        if not self.streaming:
            data = self.collect(step)
            plans, objective = self.plan(data)
            self.last = (data, objective)
            yield plans
            return
        self.open_rounds(step)
        round_id: int | None = self._rounds.pop(step)
        start = time.monotonic()
        parts: list[StepData] = []
        totals: Counter[str] = Counter({p: 0 for p in self.cfg.policies})
        tp = self.cfg.transport
        self.refill = refill = Refill.of(self.cfg)
        while round_id is not None:
            while (
                units := self.hub.take(round_id, stall_timeout_s=tp.step_timeout_s, round_timeout_s=tp.round_timeout_s)
            ) is not None:
                part = StepData.of(step, units, 0.0, self.hub.staleness)
                self._check(part)
                plans, part_totals, objective = self._plan_part(part)
                refill.informative += objective.advantages.informative_groups
                parts.append(part)
                totals.update(part_totals)
                yield plans
            round_id = self._refill_round(step, refill)
        data = StepData.merge(step, parts, time.monotonic() - start)
        self.last = (data, step_objective(data.samples, self.cfg))
        yield plan_finish(dict(totals), self.world)

    def _check(self, data: StepData) -> None:
        """The last check: malformed samples, and samples more than k versions old (by construction
        none: rounds open at most k steps ahead), are removed from `data` with their groups / envs."""
        limits = self.hub.limits
        keep, dropped = (
            screen(data.samples, limits) if limits is not None else (list(range(len(data.samples))), Counter())
        )
        k = self.cfg.train.max_staleness
        old_envs = {s.key.env for s, st in zip(data.samples, data.staleness) if st > k}
        if old_envs:
            before = len(keep)
            keep = [i for i in keep if data.samples[i].key.env not in old_envs]
            dropped["stale"] += before - len(keep)
        if dropped:
            log.error(
                "step %d: %d samples reached the learner unfit and were dropped (%s)",
                data.step,
                len(data.samples) - len(keep),
                dict(dropped),
            )
            self.dropped.update(dropped)
            data.samples = [data.samples[i] for i in keep]
            data.staleness = [data.staleness[i] for i in keep] if data.staleness else []

    def _plan_part(self, data: StepData) -> tuple[list[RankPlan], dict[str, int], StepObjective]:
        tr = self.cfg.train

        def chunk(samples: list[Sample], advantages: np.ndarray) -> tuple[list[RankPlan], dict[str, int]]:
            return plan_chunk(
                samples,
                advantages,
                policies=sorted(self.cfg.policies),
                pad_ids=self.pad_ids,
                world=self.world,
                max_tokens=tr.micro_batch_tokens,
                aggregation=tr.loss_aggregation,
                share_prefix=tr.share_prefix,
                response_budget=self.cfg.rollout.longest_response,
            )

        try:
            objective = step_objective(data.samples, self.cfg)
            return (*chunk(*objective.trained(data.samples)), objective)
        except (ValueError, OverflowError, AtgrpoError):
            log.exception("step %d: planning %d samples failed; they train on nothing", data.step, len(data.samples))
            self.dropped["unpackable"] += len(data.samples)
            data.samples, data.staleness = [], []
            return (*chunk([], np.zeros(0)), step_objective([], self.cfg))

    def plan(self, data: StepData) -> tuple[list[RankPlan], StepObjective]:
        """The step's objective (advantages, what trains) and every rank's share of the update.
        Samples that fail the last check are removed from `data` (with their groups), so its
        metrics are of what trained or was dropped as constant."""
        self._check(data)
        try:
            objective = step_objective(data.samples, self.cfg)
            plans = self._pack(*objective.trained(data.samples))
        except (ValueError, OverflowError, AtgrpoError):
            # Whatever the check missed must not end the run: this step trains on nothing.
            log.exception("step %d: planning %d samples failed; the step trains on none", data.step, len(data.samples))
            self.dropped["unpackable"] += len(data.samples)
            data.samples, data.staleness = [], []
            objective = step_objective([], self.cfg)
            plans = self._pack([], np.zeros(0))
        return plans, objective

    def _pack(self, samples: list[Sample], advantages: np.ndarray) -> list[RankPlan]:
        tr = self.cfg.train
        return plan_step(
            samples,
            advantages,
            policies=sorted(self.cfg.policies),
            pad_ids=self.pad_ids,
            world=self.world,
            minibatches=tr.minibatches,
            max_tokens=tr.micro_batch_tokens,
            aggregation=tr.loss_aggregation,
            share_prefix=tr.share_prefix,
            response_budget=self.cfg.rollout.longest_response,
        )

    def metrics(self) -> dict[str, float]:
        """`learner/dropped_<reason>` and `learner/dropped_total`: samples the last check kept from
        training; with a refill, the last step's `rollout/refill_*` (`Refill.metrics`)."""
        out = {f"learner/dropped_{k}": float(v) for k, v in self.dropped.items()}
        out["learner/dropped_total"] = float(sum(self.dropped.values()))
        out.update(self.refill.metrics())
        return out

    def evaluate(self, label: str, step: int) -> EvalSummary:
        """Greedy rollouts on the held-out seeds, done by the actors like any other round."""
        cfg = self.cfg
        t0 = time.perf_counter()
        round_id = self.hub.open_round(
            -1, eval_seeds(cfg.run.eval_seeds), cfg.rollout.envs_per_unit * EVAL_UNIT_SCALE, split="eval", greedy=True
        )
        data = self.hub.wait_round(
            round_id, stall_timeout_s=cfg.transport.step_timeout_s, round_timeout_s=cfg.transport.round_timeout_s
        )
        envs = data.envs
        summary = EvalSummary(
            label=label,
            step=step,
            success=float(np.mean([e.success for e in envs])) if envs else float("nan"),
            episode_return=float(np.mean([e.episode_return for e in envs])) if envs else float("nan"),
            levels=len(envs),
            wall_s=time.perf_counter() - t0,
            tool_programs=data.tool_programs,
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
        # Grows linearly with the team: K x agents x turns played, per env (tree sampling).
        out["rollout/samples_per_env"] = float(len(samples)) / len({s.key.env for s in samples})
        for role in sorted({s.role for s in samples}):
            out[f"rollout/{role}/reward_mean"] = float(np.mean([s.reward for s in samples if s.role == role]))
        if data.staleness:
            out["rollout/staleness_mean"] = float(np.mean(data.staleness))
            out["rollout/staleness_max"] = float(np.max(data.staleness))
    out["rollout/envs"] = float(len(envs))
    if envs:
        out["rollout/success"] = float(np.mean([e.success for e in envs]))
        out["rollout/episode_return"] = float(np.mean([e.episode_return for e in envs]))
        out["rollout/turns"] = float(np.mean([e.turns for e in envs]))
    # Program mode only (absent otherwise): beside `rollout/success`, what the tool's programs did alone.
    out.update({f"rollout/tool/{k}": v for k, v in data.tool_programs.metrics().items()})
    # Summed over the step's units, so over all actors.
    for name in msgspec.structs.fields(UnitTimings):
        out[f"time/actor_{name.name}"] = float(getattr(data.timings, name.name))
    return out


__all__ = ["Orchestrator", "rollout_metrics"]
