"""Pure-Python reference implementations of every task's rules.

They mirror the Rust tasks exactly (same RNG stream, same generator, same parsing and rewards), so
that `tests/envs/test_reference_equivalence.py` can require identical observations, rewards and
done flags, and `atgrpo-bench env` can report the Rust pool's speed against them.
"""

from __future__ import annotations

import importlib
from typing import Any

from atgrpo.envs.reference.common import Common, ReferenceEpisode, StepRecord, split_config
from atgrpo.envs.reference.parse import as_utf8

_TASK_CLASSES = {
    "planpath": ("atgrpo.envs.reference.planpath", "PlanPathRef"),
    "sokoban": ("atgrpo.envs.reference.sokoban", "SokobanRef"),
    "sudoku": ("atgrpo.envs.reference.sudoku", "SudokuRef"),
}


def task_class(task: str) -> Any:
    module, name = _TASK_CLASSES[task]
    return getattr(importlib.import_module(module), name)


def make_episode(task: str, config: dict[str, Any], seed: int, split: str = "train") -> ReferenceEpisode:
    """A freshly reset reference env: the same level the Rust pool makes for (config, seed, split)."""
    own, common = split_config(config)
    return ReferenceEpisode(task_class(task).generate(own, seed, split), common)


__all__ = ["Common", "ReferenceEpisode", "StepRecord", "as_utf8", "make_episode", "task_class"]
