"""The hub's rounds, units and leases (`hub.py` serves them): plain data, changed only under the
hub's lock.

Rounds: several may be open at once (a pipelined learner opens step s+1..s+k while it trains step
s). A round's units are handed to the learner as they commit (`Hub.take`), or all at once
(`Hub.wait_round`); `StepData` is what a finished step hands the learner.

Units and leases: a step's env seeds are cut into units. A unit handed to an actor's connection is
leased; the lease expires after `unit_timeout_s` WITHOUT PROGRESS, where progress is a sample batch
of the unit from that connection, a `UnitProgress` for it from that connection (the actor sends one
after a generate call when it has sent nothing else for a while: an evaluation unit streams no
samples), a weights request from it, or a chunk of a weights reply to it leaving the hub (the chunk's tracker, `hub_weights.Transfers`). So a unit is never taken from an
actor that is still receiving weights, however long the whole transfer takes, while an actor that
goes silent (dead, stalled, partitioned) loses its unit `unit_timeout_s` after its last sign of
life. An expired lease puts the unit back at the front of the queue and drops what the unit had
staged, so a reassigned unit is rolled out whole by its new actor.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from atgrpo.learner.intake import UnitIntake
from atgrpo.messages import EnvResult, Sample, ToolPrograms, UnitTimings, WorkUnit
from atgrpo.units import in_step_order


class CommittedUnit(msgspec.Struct, array_like=True):
    """A unit whose last batch is in: everything it produced, admitted and checked."""

    unit: WorkUnit
    samples: list[Sample]
    envs: list[EnvResult]
    timings: UnitTimings
    tool_programs: ToolPrograms = msgspec.field(default_factory=ToolPrograms)
    """Last, with a default: a checkpoint written before it existed still reads back."""


@dataclass
class StepData:
    """What a finished step hands the learner."""

    step: int
    samples: list[Sample]
    envs: list[EnvResult]
    timings: UnitTimings
    """Summed over the step's units, so over all actors."""
    wall_s: float
    staleness: list[int] = field(default_factory=list)
    """Per sample, how many versions behind its policy's current one it was when the learner took it."""
    tool_programs: ToolPrograms = field(default_factory=ToolPrograms)
    """Summed over the step's units, like `timings`."""

    @staticmethod
    def of(step: int, units: list[CommittedUnit], wall_s: float, staleness: Callable[[Sample], int]) -> StepData:
        """The step made of `units`, in canonical order; `staleness(sample)` as the ledger says it now."""
        samples, envs = in_step_order([s for u in units for s in u.samples], [e for u in units for e in u.envs])
        timings, programs = UnitTimings(), ToolPrograms()
        for u in units:
            timings, programs = timings + u.timings, programs + u.tool_programs
        return StepData(step, samples, envs, timings, wall_s, [staleness(s) for s in samples], programs)

    @staticmethod
    def merge(step: int, parts: list[StepData], wall_s: float) -> StepData:
        """One step's data from the parts it was taken in (a streaming learner's), in canonical order."""
        stale = {id(s): st for p in parts for s, st in zip(p.samples, p.staleness)}
        samples, envs = in_step_order([s for p in parts for s in p.samples], [e for p in parts for e in p.envs])
        timings, programs = UnitTimings(), ToolPrograms()
        for p in parts:
            timings, programs = timings + p.timings, programs + p.tool_programs
        staleness = [stale[id(s)] for s in samples] if stale else []
        return StepData(step, samples, envs, timings, wall_s, staleness, programs)


@dataclass
class Lease:
    unit: WorkUnit
    actor: str
    deadline: float
    """When the lease expires unless its actor makes progress first (`renew`)."""
    peer: bytes = b""
    """The connection the unit was handed to: only it may send the unit's samples (an actor id alone
    is a claim anyone can make)."""

    def renew(self, now: float, timeout_s: float) -> None:
        """Progress at `now`: the lease runs until `timeout_s` after it (never shortened)."""
        self.deadline = max(self.deadline, now + timeout_s)


@dataclass
class Round:
    """One step's (or one evaluation's) units in flight."""

    round_id: int
    step: int
    split: str
    pending: deque[WorkUnit]
    total: int
    leases: dict[int, Lease] = field(default_factory=dict)
    staged: dict[int, UnitIntake] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    committed: list[CommittedUnit] = field(default_factory=list)
    """Committed units the learner has not taken yet."""
    taken: int = 0
    started: float = field(default_factory=time.monotonic)
    last_progress: float = field(default_factory=time.monotonic)
    """Last sample batch admitted, progress report of a leased unit, or weights progress of a leased
    unit: the learner's stall clock."""
    first_wait: float | None = None
    """When the learner first waited on the round (`Hub.take`): the start of its round clock."""

    @property
    def complete(self) -> bool:
        return len(self.done) == self.total

    @property
    def drained(self) -> bool:
        return self.taken == self.total


__all__ = ["CommittedUnit", "Lease", "Round", "StepData"]
