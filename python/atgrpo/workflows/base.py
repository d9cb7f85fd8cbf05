"""What every workflow offers its callers (the actor, `atgrpo-eval`, the e2e bench): one type to run.

This module imports no workflow, so callers and workflows can both import it without a cycle.
A workflow owns whatever it starts for one `run` (an `EnvPool`) and releases it before `run`
returns; what it keeps between units (a sandbox) it releases in `close()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from atgrpo.engines.base import RolloutEngine, SamplingParams
from atgrpo.messages import EnvResult, Sample, ToolPrograms, UnitTimings, WorkUnit

GroupSink = Callable[[list[Sample]], None]
"""Receives complete groups of samples as a unit produces them (the actor streams them to the hub)."""
ProgressSink = Callable[[], None]
"""Called after every generate call of a unit (the actor's heartbeat to the hub: an evaluation unit
streams no samples, and a unit of long turns may stream none for longer than its lease)."""


@dataclass
class PolicyHandle:
    """What a workflow needs of one policy: an engine at a known version and its tokenizer."""

    engine: RolloutEngine
    tokenizer: object
    """A HF tokenizer (`encode`, `decode`, `eos_token_id`, optionally `apply_chat_template`)."""


@dataclass
class UnitResult:
    """One unit's rollout: its samples (none for greedy units), one result per env, and where its
    time went (the workflow fills `generate_s` and `env_s`; the actor adds `sync_s` and `idle_s`)."""

    samples: list[Sample]
    envs: list[EnvResult]
    timings: UnitTimings = field(default_factory=UnitTimings)
    tool_programs: ToolPrograms = field(default_factory=ToolPrograms)
    """What the tool agent's programs did (all 0 unless its answers are programs)."""


class Workflow(Protocol):
    """A task family's multi-agent rollout (games, code, math)."""

    roles: list[str]

    def run(
        self,
        unit: WorkUnit,
        policies: dict[str, PolicyHandle],
        sampling: SamplingParams,
        *,
        run_id: str = "",
        seed: int | None = None,
        on_groups: GroupSink | None = None,
        on_progress: ProgressSink | None = None,
    ) -> UnitResult:
        """Roll out `unit.seeds` with `policies` (by policy name); `on_groups` receives each group as
        soon as it is complete, `on_progress` is called after each generate call. The same (unit,
        seed, engines) gives the same samples."""
        ...

    def close(self) -> None:
        """Release what the workflow holds between units (idempotent)."""
        ...


__all__ = ["GroupSink", "PolicyHandle", "ProgressSink", "UnitResult", "Workflow"]
