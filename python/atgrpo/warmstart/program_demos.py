"""Program-mode demonstrations: the text of a tool agent's program, written by one strategy of a
documented family of search strategies, for one level.

Every program is complete and self-contained: it embeds the level as literal data (the observation's
rows, and for Plan-Path the agent's and the goal's cells as a pair of coordinates), imports nothing, reads no input, and prints its answer in the format the env's Rust parser
reads (`#### [U, R, R]` for Plan-Path; `####` then the grid, one row per line, for Sudoku). It is
deterministic: it iterates lists, tuples and dicts (insertion-ordered), never a set, and draws
nothing at random. A program is a few hundred characters of plain Python, because these are the
tokens a model learns to write.

Most strategies are flawed on purpose and a minority is correct, so a warm start on them teaches
the grammar of search programs without solving the task by itself. What each one computes:

Plan-Path (moves tried in the order U, D, L, R; `#` and the grid's edge block a move):

- `bfs`: breadth-first search from `A` over the whole grid. Correct and optimal: its plan is a
  shortest path to `G`.
- `dfs_capped`: depth-first search that marks a cell seen on first reach, never unmarks it, and
  stops extending a path at `depth_cap` moves. It fails whenever the optimum exceeds the cap, and
  also when a cell it needs was first reached by a longer detour; when it succeeds, its plan is
  valid but may be longer than optimal (at most the cap).
- `greedy`: from `A`, step to the first neighbour closer to `G` in Manhattan distance, until none
  is. Every step it takes is valid, and when it reaches `G` its plan is optimal (Manhattan length);
  it fails whenever the level needs a detour (BFS distance above the Manhattan distance), and on
  some levels that do not, when its first closer neighbour leads into a dead end.
- `bfs_swapped_ud`: `bfs` whose move table pairs `U` with the step down and `D` with the step up
  (a wrong neighbour order). Its search is right and its labels are not: it prints a shortest path
  with every vertical move mirrored. It solves the levels whose path it finds is purely horizontal,
  and by luck a few whose path goes up and back down as much (a detour whose mirror is free too).
- `bfs_edge_blind`: `bfs` with an off-by-one bound (`0 <= y < H - 1`, `0 <= x < W - 1`): it never
  steps into the last row or the last column. It fails whenever `G` is on them (it prints the empty
  list); otherwise it prints what `bfs` prints on the level with their free cells walled, which is
  longer than optimal, or nothing, when every short way runs along them.

Sudoku 4x4 (cells in row-major order, digits tried in ascending order):

- `backtrack`: backtracking over the empty cells, checking row, column and box. Correct: it prints
  the puzzle's unique solution.
- `greedy`: one pass, each empty cell set to its smallest digit allowed by row, column and box at
  that moment, never revisited; a cell with no allowed digit stays `.`. What it fills never
  conflicts, so it solves a puzzle exactly when it leaves no cell empty.
- `rows_only`: backtracking that checks rows only. It always fills the grid with rows that hold
  each digit once and keeps the givens; it solves a puzzle exactly when its columns and boxes
  happen to be valid too.
- `no_boxes`: backtracking that checks rows and columns, not boxes. It prints a Latin square that
  keeps the givens (or the puzzle unchanged when none exists); it solves exactly when the boxes
  happen to be valid too.

A failed search still prints an answer in the format: an empty move list (`#### []`, which the env
counts as unparseable), a partial walk, or a grid with empty cells.
"""

from __future__ import annotations

from atgrpo.workflows.prompts import agent_and_goal

PLANPATH_STRATEGIES = ("bfs", "dfs_capped", "greedy", "bfs_swapped_ud", "bfs_edge_blind")
SUDOKU_STRATEGIES = ("backtrack", "greedy", "rows_only", "no_boxes")
CORRECT = {"planpath": "bfs", "sudoku": "backtrack"}
"""The one correct strategy of each task; the others are flawed (module docstring)."""
DEPTH_CAP = 8
"""`dfs_capped`'s default cap. Measured on 100 train levels: below the optimum of 7% of the CPU demo's
6x6 levels and of 51% of the paper's 10x10 ones."""

_MOVES = '(("U", -1, 0), ("D", 1, 0), ("L", 0, -1), ("R", 0, 1))'
_MOVES_SWAPPED_UD = '(("U", 1, 0), ("D", -1, 0), ("L", 0, -1), ("R", 0, 1))'
_FREE = 'if 0 <= y < H and 0 <= x < W and g[y][x] != "#"'
_FREE_EDGE_BLIND = 'if 0 <= y < H - 1 and 0 <= x < W - 1 and g[y][x] != "#"'

_GRID_HEADER = """g = {rows}
H, W = len(g), len(g[0])
A, G = {start}, {goal}
M = {moves}
"""
"""A Plan-Path program's data. The agent's and the goal's cells are literal coordinates (the prompt's
`A=r,c G=r,c` line), not looked up in the rows: a search then needs only the walls of its copy of
the grid right. Looked up (`find("A")`), one cell of a 36-cell copy written `G` where `A` stands made
the program crash, and that was most crashes of a warm-started tool (trials 2 and 5,
docs/learning.md)."""
_PRINT_MOVES = 'print("#### [" + ", ".join({moves}) + "]")\n'
_PRINT_MOVES_COMPACT = 'print("[" + ",".join({moves}) + "]")\n'
"""How a program prints its moves: the paper templates' `#### [U, R]`, or the compact templates'
`[U,R]` (`compact=True`), so a program prints its answer in the format its prompt asks for and the
plan agent, shown that output, answers by copying it."""

_BFS = """path = {{A: []}}
queue = [A]
for r, c in queue:
    for m, dr, dc in M:
        y, x = r + dr, c + dc
        {free} and (y, x) not in path:
            path[y, x] = path[r, c] + [m]
            queue.append((y, x))
"""

_DFS = """seen = {{A}}
def dfs(r, c, moves):
    if (r, c) == G:
        return moves
    if len(moves) < {cap}:
        for m, dr, dc in M:
            y, x = r + dr, c + dc
            {free} and (y, x) not in seen:
                seen.add((y, x))
                found = dfs(y, x, moves + [m])
                if found:
                    return found
    return []
"""

_GREEDY = """(r, c), (gr, gc) = A, G
moves = []
while (r, c) != (gr, gc):
    for m, dr, dc in M:
        y, x = r + dr, c + dc
        {free} and abs(gr - y) + abs(gc - x) < abs(gr - r) + abs(gc - c):
            break
    else:
        break
    moves.append(m)
    r, c = y, x
"""


def planpath_program(obs: str, strategy: str, *, depth_cap: int = DEPTH_CAP, compact: bool = False) -> str:
    """The program `strategy` (one of `PLANPATH_STRATEGIES`) writes for the Plan-Path observation `obs`
    (its rows, `A` the agent, `G` the goal; any state of an episode); `compact`: it prints the compact
    templates' answer format."""
    rows = obs.split()
    if not rows or any(len(r) != len(rows[0]) for r in rows) or sum(r.count("A") for r in rows) != 1:
        raise ValueError(f"not a Plan-Path observation: {obs!r}")
    moves = _MOVES_SWAPPED_UD if strategy == "bfs_swapped_ud" else _MOVES
    print_moves = _PRINT_MOVES_COMPACT if compact else _PRINT_MOVES
    cells = agent_and_goal(obs)  # the prompt's `A=r,c G=r,c` line, so the literals are the prompt's
    if cells is None:
        raise ValueError(f"a Plan-Path observation without a goal: {obs!r}")
    start, goal = cells
    head = _GRID_HEADER.format(rows=repr(rows).replace("'", '"'), start=start, goal=goal, moves=moves)
    if strategy in ("bfs", "bfs_swapped_ud", "bfs_edge_blind"):
        free = _FREE_EDGE_BLIND if strategy == "bfs_edge_blind" else _FREE
        return head + _BFS.format(free=free) + print_moves.format(moves="path.get(G, [])")
    if strategy == "dfs_capped":
        return head + _DFS.format(cap=int(depth_cap), free=_FREE) + print_moves.format(moves="dfs(*A, [])")
    if strategy == "greedy":
        return head + _GREEDY.format(free=_FREE) + print_moves.format(moves="moves")
    raise ValueError(f"unknown Plan-Path strategy {strategy!r}; expected one of {PLANPATH_STRATEGIES}")


_SUDOKU_CHECKS = {
    "full": "all(g[r][i] != d and g[i][c] != d and g[r // 2 * 2 + i // 2][c // 2 * 2 + i % 2] != d for i in range(4))",
    "no_boxes": "all(g[r][i] != d and g[i][c] != d for i in range(4))",
    "rows_only": "d not in g[r]",
}
_SUDOKU_HEADER = """g = [list(row) for row in "{rows}".split()]
def ok(r, c, d):
    return {check}
"""
_BACKTRACK = """def solve(k):
    if k == 16:
        return True
    r, c = divmod(k, 4)
    if g[r][c] != ".":
        return solve(k + 1)
    for d in "1234":
        if ok(r, c, d):
            g[r][c] = d
            if solve(k + 1):
                return True
            g[r][c] = "."
    return False
solve(0)
"""
_ONE_PASS = """for k in range(16):
    r, c = divmod(k, 4)
    if g[r][c] == ".":
        g[r][c] = next((d for d in "1234" if ok(r, c, d)), ".")
"""
_PRINT_GRID = 'print("####")\nfor row in g:\n    print(" ".join(row))\n'
_PRINT_GRID_COMPACT = 'for row in g:\n    print("".join(row))\n'
"""The grid as the paper templates' answer (`####`, then rows of spaced digits) or the compact ones'
(rows of digits)."""


def sudoku_program(obs: str, strategy: str, *, compact: bool = False) -> str:
    """The program `strategy` (one of `SUDOKU_STRATEGIES`) writes for the 4x4 Sudoku observation `obs`
    (rows of space-separated cells, `.` empty); `compact`: it prints the compact templates' format."""
    rows = ["".join(line.split()) for line in obs.strip().splitlines()]
    if len(rows) != 4 or any(len(r) != 4 or r.strip(".1234") for r in rows):
        raise ValueError(f"not a 4x4 Sudoku observation: {obs!r}")
    check = {"rows_only": "rows_only", "no_boxes": "no_boxes"}.get(strategy, "full")
    head = _SUDOKU_HEADER.format(rows=" ".join(rows), check=_SUDOKU_CHECKS[check])
    print_grid = _PRINT_GRID_COMPACT if compact else _PRINT_GRID
    if strategy in ("backtrack", "rows_only", "no_boxes"):
        return head + _BACKTRACK + print_grid
    if strategy == "greedy":
        return head + _ONE_PASS + print_grid
    raise ValueError(f"unknown Sudoku strategy {strategy!r}; expected one of {SUDOKU_STRATEGIES}")


def strategy_program(task: str, obs: str, strategy: str, *, depth_cap: int = DEPTH_CAP, compact: bool = False) -> str:
    """The program of `strategy` for a level of `task` ("planpath" or "sudoku"); `depth_cap` is
    `dfs_capped`'s (Plan-Path only); `compact`: it prints the compact templates' answer format."""
    if task == "planpath":
        return planpath_program(obs, strategy, depth_cap=depth_cap, compact=compact)
    if task == "sudoku":
        return sudoku_program(obs, strategy, compact=compact)
    raise ValueError(f"no program strategies for task {task!r}")


def strategies(task: str) -> tuple[str, ...]:
    """The strategy names of `task`, the correct one first."""
    family = {"planpath": PLANPATH_STRATEGIES, "sudoku": SUDOKU_STRATEGIES}.get(task)
    if family is None:
        raise ValueError(f"no program strategies for task {task!r}")
    return family


__all__ = [
    "CORRECT",
    "DEPTH_CAP",
    "PLANPATH_STRATEGIES",
    "SUDOKU_STRATEGIES",
    "planpath_program",
    "strategies",
    "strategy_program",
    "sudoku_program",
]
