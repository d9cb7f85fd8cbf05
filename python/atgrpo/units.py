"""What a step rolls out: the data cursor, work units and their sampling seeds (pure functions).

Everything here is a function of (config, step) or of the unit itself, never of who runs it or
when. That is what makes a resumed run see the levels an uninterrupted run would have, a reassigned
unit roll out exactly as its first actor would have, and the in-process reference step
(`atgrpo.reference_step`) produce the samples the distributed system produces.

Imports only the message records, so the hub, the actor, evaluation and the reference step can all
share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from atgrpo.messages import EnvResult, Sample, ToolPrograms, UnitTimings, WorkUnit

if TYPE_CHECKING:
    from atgrpo.engines.base import SamplingParams
    from atgrpo.workflows.base import PolicyHandle, Workflow

SEED_BASE = 0
"""Training seeds of step s are SEED_BASE + s * envs_per_step + i (warm-start demos use a disjoint range)."""
REFILL_SEED_BASE = 1 << 41
"""Refill envs of step s (`learner.refill`) are REFILL_SEED_BASE + s * rollout.refill_max_envs + j:
disjoint from every step's own seeds and from the warm-start demos' (`warmstart.demos`, from 1 << 40)."""
EVAL_UNIT_SCALE = 4
"""Evaluation units hold this many times `rollout.envs_per_unit` envs: greedy units keep no samples
and run one branch per env, so a larger unit costs no more memory than a training one."""


def step_seeds(envs_per_step: int, step: int) -> list[int]:
    """The training env seeds of `step` (split "train")."""
    return [SEED_BASE + step * envs_per_step + i for i in range(envs_per_step)]


def refill_seeds(step: int, first: int, count: int, max_envs: int) -> list[int]:
    """Refill envs `first`..`first + count - 1` of `step` (split "train"), of at most `max_envs` a step."""
    if first + count > max_envs:
        raise ValueError(f"step {step}: refill envs up to {first + count} exceed the cap of {max_envs}")
    return [REFILL_SEED_BASE + step * max_envs + first + j for j in range(count)]


def eval_seeds(count: int) -> list[int]:
    """The held-out env seeds (split "eval"): the same levels at every evaluation."""
    return list(range(count))


def cut_units(
    first_unit_id: int,
    step: int,
    seeds: list[int],
    envs_per_unit: int,
    *,
    split: str,
    versions: dict[str, int],
    greedy: bool,
    first_env: int = 0,
) -> list[WorkUnit]:
    """`seeds` cut into units of at most `envs_per_unit` envs, ids counting up from `first_unit_id`.

    `env_offset` is a unit's first env's index within the step (counting from `first_env`: a
    refill's envs follow the step's own), so group keys never collide across units and a step's
    samples sort the same way whoever rolled them out."""
    if envs_per_unit < 1:
        raise ValueError(f"envs_per_unit must be >= 1, got {envs_per_unit}")
    return [
        WorkUnit(
            unit_id=first_unit_id + i,
            step=step,
            seeds=list(seeds[lo : lo + envs_per_unit]),
            env_offset=first_env + lo,
            split=split,
            versions=dict(versions),
            greedy=greedy,
        )
        for i, lo in enumerate(range(0, len(seeds), envs_per_unit))
    ]


def unit_seed(run_seed: int, unit: WorkUnit) -> int:
    """The sampling seed of a unit: a function of what the unit is (step, first env), not of its id."""
    return (run_seed * 1_000_003 + unit.step * 10_007 + unit.env_offset) % (2**61)


def in_step_order(samples: Iterable[Sample], envs: Iterable[EnvResult]) -> tuple[list[Sample], list[EnvResult]]:
    """A step's samples and env results in their canonical order (by group key, then branch; by
    env): arrival order depends on which actor finished first, and training must not."""
    return (
        sorted(samples, key=lambda s: (s.key.env, s.key.agent, s.key.turn, s.branch)),
        sorted(envs, key=lambda e: e.env),
    )


class LocalRollout(NamedTuple):
    """Units rolled out in this process: samples and env results in step order, the rest summed."""

    samples: list[Sample]
    envs: list[EnvResult]
    timings: UnitTimings
    tool_programs: ToolPrograms


def roll_out_units(
    workflow: "Workflow",
    policies: dict[str, "PolicyHandle"],
    units: list[WorkUnit],
    sampling: "SamplingParams",
    *,
    run_id: str,
    run_seed: int,
) -> LocalRollout:
    """Roll `units` out in this process, one after the other, each with its `unit_seed`, as the
    actors would."""
    samples: list[Sample] = []
    envs: list[EnvResult] = []
    timings, programs = UnitTimings(), ToolPrograms()
    for unit in units:
        result = workflow.run(unit, policies, sampling, run_id=run_id, seed=unit_seed(run_seed, unit))
        samples += result.samples
        envs += result.envs
        timings, programs = timings + result.timings, programs + result.tool_programs
    return LocalRollout(*in_step_order(samples, envs), timings, programs)


__all__ = [
    "EVAL_UNIT_SCALE",
    "REFILL_SEED_BASE",
    "SEED_BASE",
    "LocalRollout",
    "cut_units",
    "eval_seeds",
    "in_step_order",
    "refill_seeds",
    "roll_out_units",
    "step_seeds",
    "unit_seed",
]
