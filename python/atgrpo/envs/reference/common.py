"""Episode bookkeeping shared by the reference tasks; mirrors `Pool::step` in `rust/envs/src/pool.rs`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol


@dataclass
class Common:
    max_steps: int = 20
    max_moves: int = 256
    alpha: float = 1.0
    success_bonus: float = 1.0
    invalid_move_penalty: float = -0.05
    parse_penalty: float = -0.5


COMMON_KEYS = frozenset(f.name for f in fields(Common))


@dataclass
class Outcome:
    local: float = 0.0
    solved: bool = False
    failed: bool = False
    valid: bool = False


@dataclass
class StepRecord:
    obs: str
    reward: float
    reward_team: float
    reward_local: float
    done: bool
    success: bool
    truncated: bool
    valid: bool


class ReferenceTask(Protocol):
    def step(self, common: Common, action: bytes | None) -> Outcome: ...
    def render(self) -> str: ...
    def optimal_len(self) -> int: ...


def split_config(config: dict[str, Any]) -> tuple[dict[str, Any], Common]:
    own = {k: v for k, v in config.items() if k not in COMMON_KEYS}
    common = Common(**{k: v for k, v in config.items() if k in COMMON_KEYS})
    return own, common


class ReferenceEpisode:
    """One env of the reference implementation: a task state plus the pool's turn bookkeeping."""

    def __init__(self, state: ReferenceTask, common: Common) -> None:
        self.state = state
        self.common = common
        self.steps = 0
        self.done = False
        self.success = False

    def step(self, action: bytes | None) -> StepRecord:
        if self.done:
            raise RuntimeError("episode is over")
        c = self.common
        outcome = self.state.step(c, action)
        self.steps += 1
        team = c.success_bonus if outcome.solved else 0.0
        truncated = not outcome.solved and not outcome.failed and self.steps >= c.max_steps
        self.done = outcome.solved or outcome.failed or truncated
        self.success = outcome.solved
        return StepRecord(
            obs=self.state.render(),
            reward=c.alpha * team + outcome.local,
            reward_team=team,
            reward_local=outcome.local,
            done=self.done,
            success=outcome.solved,
            truncated=truncated,
            valid=outcome.valid,
        )
