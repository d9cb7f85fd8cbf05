"""Which strategy writes each program-mode tool demo: a fixed mix over `program_demos`' family.

The warm start teaches the grammar of search programs and must not solve the task by itself (the
team after the warm start stays at or below 50% held out, issue 47). Held-out evaluation decodes
greedily, and a model trained on this mix follows, at each point where the family's programs part,
the branch most of its demos took. The programs part in a fixed order (Plan-Path: the move table,
then the search, then its bounds; Sudoku: the check, then the search), so the mix sets the most
frequent branch at every fork to a strategy that mostly fails, by a clear margin, and makes the
correct strategy the most frequent of the rest: a warm-started team that mostly fails, and one
decision (the first fork) between it and a correct program, which RL's samples cross often.

Why the first fork's margin is wide (0.75 against 0.25, not 0.60 against 0.40 as first chosen):
the share a warm-started model gives a branch is the demos' share only roughly (the last batches
weigh more), and at 0.60 one warm start of Plan-Path took the swapped table (the team 40% after the
warm start) and the next, with the same demos for the tool, the correct one (the team 100%, BFS
from the first step; trials 7 and 8, docs/learning.md). At 0.25 RL's samples (temperature 0.7)
still take the other branch in about one program in six.

Plan-Path (success of each alone on 200 levels of the 6x6 demo, after one answer):
- `bfs_swapped_ud` 0.75 (4%): the first fork is the move table, swapped 0.75 against 0.25;
- `bfs` 0.12 (100%): among the unswapped, the BFS body (0.18 with `bfs_edge_blind`) leads, and
  within it the correct bound (0.12 against 0.06);
- `bfs_edge_blind` 0.06 (58%), `greedy` 0.05 (62%);
- `dfs_capped` 0.02 with a cap of `DEPTH_CAP` = 5 moves (37%; 71% at the family's default cap of 8,
  a near solver, hence the lowest weight and the lower cap).

Sudoku 4x4:
- `rows_only` 0.75 (0%): the first fork is the check, rows only 0.75 against 0.25 (row, column and
  box, or no boxes);
- `backtrack` 0.20 (100%): with the full check, backtracking leads the one-pass fill (0.20 / 0.03);
- `greedy` 0.03 (37%);
- `no_boxes` 0.02 (89%: a near solver, the lowest weight).
Backtracking had 0.12 (greedy 0.08, no_boxes 0.05) until Sudoku's trial 11, which moved the
minority's share to the correct program together with the RL recipe's two changes (lr 1e-4,
dynamic sampling); the warm start's first fork, and so greedy evaluation, stayed rows only. How much
each change did is in docs/learning.md (trials 10 and 11).

Invariants: each mix names only its task's strategies and sums to 1; the correct strategy is a
minority and never the most frequent; draws come from the caller's generator, one per demo.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from atgrpo.warmstart.program_demos import strategies, strategy_program

MIXES: dict[str, dict[str, float]] = {
    "planpath": {"bfs_swapped_ud": 0.75, "bfs": 0.12, "bfs_edge_blind": 0.06, "greedy": 0.05, "dfs_capped": 0.02},
    "sudoku": {"rows_only": 0.75, "backtrack": 0.20, "greedy": 0.03, "no_boxes": 0.02},
}
"""Task -> strategy -> share of the tool demos it writes (module docstring: why these)."""
DEPTH_CAP = 5
"""`dfs_capped`'s cap in the demos: on the 6x6 demo it then solves 37% alone, not 71%."""


def mix_of(task: str) -> dict[str, float]:
    """The mix of `task`, checked against its family (module invariants)."""
    mix = MIXES.get(task)
    if mix is None:
        raise ValueError(f"no program demo mix for task {task!r}; program-mode demos exist for {sorted(MIXES)}")
    if not set(mix) <= set(strategies(task)) or abs(sum(mix.values()) - 1.0) > 1e-9:
        raise ValueError(f"the {task} mix must be shares of its strategies {strategies(task)}, got {mix}")
    return mix


def draw_strategies(task: str, count: int, rng: np.random.Generator) -> list[str]:
    """`count` strategy names drawn independently from `task`'s mix."""
    mix = mix_of(task)
    names = list(mix)
    picks = rng.choice(len(names), size=count, p=np.array([mix[s] for s in names]))
    return [names[i] for i in picks]


def mix_programs(
    task: str, observations: Sequence[str], rng: np.random.Generator, *, compact: bool = False
) -> list[str]:
    """One tool demo program per observation, each by a strategy drawn from the mix; `compact`: the
    programs print the compact templates' answer format."""
    drawn = draw_strategies(task, len(observations), rng)
    return [strategy_program(task, obs, s, depth_cap=DEPTH_CAP, compact=compact) for obs, s in zip(observations, drawn)]


__all__ = ["DEPTH_CAP", "MIXES", "draw_strategies", "mix_of", "mix_programs"]
