"""`EnvPool`: N environments of one task, state owned by Rust, driven in batches.

Like EnvPool (sail-sg): every call takes `env_ids` and returns columns in that order, tagged with
the same `env_ids`. Returned arrays and lists are fresh and owned by the caller. Each batch call
validates all ids first, so a call that raises changed nothing. Batch work runs without the GIL.

Actions are the raw text an LLM wrote. Text that does not parse, is empty, huge or not valid
Unicode is an *invalid action*: it earns the task's parse penalty and `valid=False`; it never
raises. Wrong env ids, length mismatches, stepping an env that is not reset or already done, and a
closed pool raise the typed exceptions of `atgrpo.errors`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from atgrpo import _core

TASKS: tuple[str, ...] = tuple(_core.TASKS)
IdsLike = int | Sequence[int] | npt.NDArray[np.integer]


@dataclass(frozen=True)
class StepResult:
    """Columns of one `step`; row i belongs to `env_ids[i]`."""

    env_ids: npt.NDArray[np.int64]
    obs: list[str]
    reward: npt.NDArray[np.float64]
    """alpha * reward_team + reward_local."""
    reward_team: npt.NDArray[np.float64]
    """Success bonus on the solving step, else 0."""
    reward_local: npt.NDArray[np.float64]
    """Progress shaping plus penalties."""
    done: npt.NDArray[np.bool_]
    success: npt.NDArray[np.bool_]
    """Solved on this step. Never true because a limit was hit."""
    truncated: npt.NDArray[np.bool_]
    """The turn limit ended the episode unsolved (a failure)."""
    valid: npt.NDArray[np.bool_]
    """The action parsed and every move in it was legal."""


@dataclass(frozen=True)
class ResetResult:
    env_ids: npt.NDArray[np.int64]
    obs: list[str]


@dataclass(frozen=True)
class SolveResult:
    env_ids: npt.NDArray[np.int64]
    plans: list[str | None]
    """An optimal answer from the current state in the prompt format (None if unsolvable)."""
    optimal_len: npt.NDArray[np.uint32]
    """Optimal solution length from the level's start (moves, pushes or empty cells; see the task)."""


@dataclass(frozen=True)
class StatusResult:
    env_ids: npt.NDArray[np.int64]
    steps: npt.NDArray[np.uint32]
    done: npt.NDArray[np.bool_]
    success: npt.NDArray[np.bool_]


def _ids(env_ids: IdsLike) -> npt.NDArray[np.int64]:
    arr = np.asarray(env_ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"env_ids must be a 1-D sequence of integers, got dtype {arr.dtype} with shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


class EnvPool:
    """A batch of `num_envs` environments of `task` ("planpath", "sokoban" or "sudoku").

    `config` holds the task's keys and the common keys (`max_steps`, `max_moves`, `alpha`,
    `success_bonus`, `invalid_move_penalty`, `parse_penalty`); see `envs/<task>/README.md`.
    Unknown keys and out-of-range values raise `InvalidConfigError`.
    """

    def __init__(self, task: str, num_envs: int, **config: Any) -> None:
        self._pool = _core.EnvPool(task, int(num_envs), json.dumps(config))
        self.task: str = self._pool.task
        self.num_envs: int = self._pool.num_envs

    @property
    def config(self) -> dict[str, Any]:
        """The resolved config, defaults included."""
        return dict(json.loads(self._pool.config_json))

    def reset(self, env_ids: IdsLike, seeds: IdsLike, split: str = "train") -> ResetResult:
        """Start a fresh level in each env. Train and eval seeds never give the same level."""
        ids = _ids(env_ids)
        seed_arr = np.ascontiguousarray(np.asarray(seeds).reshape(-1), dtype=np.uint64)
        return ResetResult(ids, self._pool.reset(ids, seed_arr, split))

    def step(self, env_ids: IdsLike, actions: Iterable[str | bytes | None]) -> StepResult:
        ids = _ids(env_ids)
        return StepResult(ids, *self._pool.step(ids, list(actions)))

    def fork(self, src_id: int, dst_ids: IdsLike) -> None:
        """Copy env `src_id`'s whole state (level, position, turn count) into each of `dst_ids`."""
        self._pool.fork(int(src_id), _ids(dst_ids))

    def render(self, env_ids: IdsLike) -> list[str]:
        return list(self._pool.render(_ids(env_ids)))

    def solve(self, env_ids: IdsLike) -> SolveResult:
        ids = _ids(env_ids)
        plans, lens = self._pool.solve(ids)
        return SolveResult(ids, plans, lens)

    def status(self, env_ids: IdsLike) -> StatusResult:
        ids = _ids(env_ids)
        return StatusResult(ids, *self._pool.status(ids))

    def snapshot(self, env_ids: IdsLike) -> list[bytes]:
        """Self-contained bytes per env; `restore` accepts them in any pool of the same task and config."""
        return list(self._pool.snapshot(_ids(env_ids)))

    def restore(self, env_ids: IdsLike, snapshots: Sequence[bytes]) -> None:
        blobs = [bytes(b) for b in snapshots]
        self._pool.restore(_ids(env_ids), blobs)

    def close(self) -> None:
        """Free all envs; every later call raises `PoolClosedError`."""
        self._pool.close()

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EnvPool(task={self.task!r}, num_envs={self.num_envs})"
