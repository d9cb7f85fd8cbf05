"""Train and eval levels never overlap (python/atgrpo/ALGORITHM.md, rule "Disjoint splits"), proven on 10,000
seeds per task.

Levels are compared by their full snapshot (walls, targets, givens, start state), not by seed.
"""

import numpy as np
import pytest

import atgrpo

N = 10_000


def _levels(pool: atgrpo.EnvPool, split: str) -> set[bytes]:
    ids = np.arange(N)
    pool.reset(ids, np.arange(N, dtype=np.uint64), split)
    return set(pool.snapshot(ids))


@pytest.mark.parametrize("task", ["planpath", "sokoban", "sudoku"])
def test_train_and_eval_levels_are_disjoint(task: str) -> None:
    pool = atgrpo.EnvPool(task, N)
    train, evaluation = _levels(pool, "train"), _levels(pool, "eval")
    assert train.isdisjoint(evaluation)
    # The check only means something if each split is varied; 4x4 Sudoku has 288 solution grids,
    # so its puzzles repeat, but each split still has many distinct ones.
    assert len(train) > 100 and len(evaluation) > 100
