"""Program-mode demos: each strategy's program, run in the sandbox the workflows use, prints what that
strategy computes, checked against the Rust env (simulator and solver). BFS and backtracking are
right and optimal; every flawed strategy is wrong exactly where its definition says it is.

The default tier checks 10 levels per task; the integration tier the same on 100."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import numpy as np
import pytest

from atgrpo.config import load_config
from atgrpo.envs import EnvPool
from atgrpo.envs.reference.parse import parse_moves
from atgrpo.warmstart.program_demos import (
    DEPTH_CAP,
    PLANPATH_STRATEGIES,
    SUDOKU_STRATEGIES,
    planpath_program,
    strategies,
    strategy_program,
    sudoku_program,
)
from atgrpo.workflows.programs import LazySandbox, run_printing_programs

DEMO_PLANPATH = {"width": 6, "height": 6, "obstacle_ratio": 0.25, "min_distance": 3, "stop_at_goal": False}
"""The CPU demo's Plan-Path (envs/planpath/train.toml)."""
FORBIDDEN_NAMES = {"input", "open", "eval", "exec", "compile", "__import__", "globals", "getattr"}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[LazySandbox]:
    lazy = LazySandbox(load_config(None, []))
    yield lazy
    lazy.close()


def printed(sandbox: LazySandbox, programs: list[str]) -> list[str]:
    runs = run_printing_programs(sandbox, programs)
    assert all(r.ran for r in runs), [(r.verdict, r.detail) for r in runs if not r.ran]
    return [r.text.strip() for r in runs]


def simulate(pool: EnvPool, seeds: np.ndarray, answers: list[str]):
    """Each answer stepped on a fresh copy of its level (env ids `n .. 2n`, the first n stay untouched)."""
    ids = np.arange(len(seeds)) + len(seeds)
    pool.reset(ids, seeds, "train")
    return pool.step(ids, answers)


def moves_of(answer: str) -> list[str]:
    return parse_moves(answer.encode(), 256) or []


def swap_vertical(answer: str) -> str:
    return answer.translate(str.maketrans("UD", "DU"))


def walled(obs: str) -> str:
    """The level with its last row and column turned into obstacles (the agent's and goal's cells kept)."""
    rows = [list(r) for r in obs.split()]
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if (r == len(rows) - 1 or c == len(row) - 1) and ch == ".":
                row[c] = "#"
    return "\n".join("".join(r) for r in rows)


def check_planpath(sandbox: LazySandbox, n: int) -> dict[str, float]:
    """Runs every strategy on `n` demo levels and checks each against its definition; success shares."""
    seeds = np.arange(n)
    pool = EnvPool("planpath", 2 * n, **DEMO_PLANPATH)
    try:
        obs = pool.reset(seeds, seeds, "train").obs
        optimal = pool.solve(seeds).optimal_len.astype(int)
        strategies_run = [*PLANPATH_STRATEGIES, "bfs_walled"]
        programs = [
            planpath_program(walled(o), "bfs") if s == "bfs_walled" else planpath_program(o, s)
            for s in strategies_run
            for o in obs
        ]
        out = printed(sandbox, programs)
        outputs = {s: out[k * n : (k + 1) * n] for k, s in enumerate(strategies_run)}
        results = {s: simulate(pool, seeds, outputs[s]) for s in PLANPATH_STRATEGIES}
        unswapped = simulate(pool, seeds, [swap_vertical(a) for a in outputs["bfs_swapped_ud"]])
    finally:
        pool.close()
    grids = [o.split() for o in obs]
    goal = [next((r, row.index("G")) for r, row in enumerate(g) if "G" in row) for g in grids]
    agent = [next((r, row.index("A")) for r, row in enumerate(g) if "A" in row) for g in grids]
    manhattan = [abs(a[0] - b[0]) + abs(a[1] - b[1]) for a, b in zip(agent, goal)]
    for i in range(n):
        bfs, dfs, greedy = (moves_of(outputs[s][i]) for s in ("bfs", "dfs_capped", "greedy"))
        res = {s: (bool(results[s].success[i]), bool(results[s].valid[i])) for s in PLANPATH_STRATEGIES}
        assert res["bfs"] == (True, True) and len(bfs) == optimal[i], outputs["bfs"][i]
        # dfs_capped: finds the goal within the cap or prints the empty list, never a wrong walk.
        assert res["dfs_capped"][0] == bool(dfs), outputs["dfs_capped"][i]
        if dfs:
            assert res["dfs_capped"][1] and optimal[i] <= len(dfs) <= DEPTH_CAP
        if optimal[i] > DEPTH_CAP:
            assert not dfs
        # greedy: every step legal and closer; optimal when it arrives; lost whenever a detour is needed.
        assert not greedy or res["greedy"][1]
        if res["greedy"][0]:
            assert len(greedy) == optimal[i] == manhattan[i]
        if optimal[i] > manhattan[i]:
            assert not res["greedy"][0]
        # bfs_swapped_ud: a shortest path with vertical moves mirrored; right when it has none, or when it
        # goes up as much as down and the mirrored walk is free (a legal mirror ends `2 * (D - U)` rows off).
        swapped = moves_of(outputs["bfs_swapped_ud"][i])
        assert bool(unswapped.success[i]) and bool(unswapped.valid[i]) and len(swapped) == optimal[i]
        if "U" not in swapped and "D" not in swapped:
            assert res["bfs_swapped_ud"] == (True, True)
        elif res["bfs_swapped_ud"][1]:
            assert res["bfs_swapped_ud"][0] == (swapped.count("U") == swapped.count("D"))
        # bfs_edge_blind: BFS of the level without its last row and column.
        if goal[i][0] == len(grids[i]) - 1 or goal[i][1] == len(grids[i][0]) - 1:
            assert outputs["bfs_edge_blind"][i] == "#### []"
        else:
            assert outputs["bfs_edge_blind"][i] == outputs["bfs_walled"][i]
        if res["bfs_edge_blind"][0]:
            assert res["bfs_edge_blind"][1] and len(moves_of(outputs["bfs_edge_blind"][i])) >= optimal[i]
    return {s: float(np.mean(results[s].success)) for s in PLANPATH_STRATEGIES}


def grid_of(answer: str) -> list[list[str]]:
    head, _, body = answer.rpartition("####")
    assert head == "", answer
    rows = [line.split() for line in body.strip().splitlines()]
    assert len(rows) == 4 and all(len(r) == 4 for r in rows), answer
    return rows


def units(grid: list[list[str]]) -> dict[str, list[list[str]]]:
    boxes = [[grid[b // 2 * 2 + i // 2][b % 2 * 2 + i % 2] for i in range(4)] for b in range(4)]
    return {"rows": grid, "columns": [list(c) for c in zip(*grid)], "boxes": boxes}


def conflict_free(cells: list[str]) -> bool:
    digits = [d for d in cells if d != "."]
    return len(digits) == len(set(digits))


def complete(cells: list[str]) -> bool:
    return sorted(cells) == ["1", "2", "3", "4"]


def check_sudoku(sandbox: LazySandbox, n: int) -> dict[str, float]:
    """Runs every strategy on `n` 4x4 puzzles and checks each against its definition; success shares."""
    seeds = np.arange(n)
    pool = EnvPool("sudoku", 2 * n, size=4)
    try:
        obs = pool.reset(seeds, seeds, "train").obs
        solutions = [grid_of(p) for p in pool.solve(seeds).plans]
        out = printed(sandbox, [sudoku_program(o, s) for s in SUDOKU_STRATEGIES for o in obs])
        outputs = {s: out[k * n : (k + 1) * n] for k, s in enumerate(SUDOKU_STRATEGIES)}
        results = {s: simulate(pool, seeds, outputs[s]) for s in SUDOKU_STRATEGIES}
    finally:
        pool.close()
    for i in range(n):
        puzzle = [line.split() for line in obs[i].splitlines()]
        grids = {s: grid_of(outputs[s][i]) for s in SUDOKU_STRATEGIES}
        solved = {s: bool(results[s].success[i]) for s in SUDOKU_STRATEGIES}
        for s, g in grids.items():  # every strategy keeps the givens and writes only valid moves
            assert all(p == "." or p == c for pr, gr in zip(puzzle, g) for p, c in zip(pr, gr)), (s, outputs[s][i])
            assert bool(results[s].valid[i]), (s, outputs[s][i])
        assert solved["backtrack"] and grids["backtrack"] == solutions[i]
        # greedy: what it fills never conflicts, so it solves exactly when it fills every cell.
        assert all(conflict_free(u) for us in units(grids["greedy"]).values() for u in us)
        assert solved["greedy"] == all("." not in r for r in grids["greedy"])
        # rows_only: always complete rows; solved exactly when columns and boxes happen to hold.
        rows_only = units(grids["rows_only"])
        assert all(complete(r) for r in rows_only["rows"])
        assert solved["rows_only"] == all(complete(u) for u in rows_only["columns"] + rows_only["boxes"])
        # no_boxes: a Latin square (or the puzzle unchanged when none exists); solved when the boxes hold.
        no_boxes = units(grids["no_boxes"])
        if grids["no_boxes"] == puzzle:
            assert not solved["no_boxes"]
        else:
            assert all(complete(u) for u in no_boxes["rows"] + no_boxes["columns"])
            assert solved["no_boxes"] == all(complete(b) for b in no_boxes["boxes"])
    return {s: float(np.mean(results[s].success)) for s in SUDOKU_STRATEGIES}


def test_planpath_strategies_compute_what_they_say(sandbox: LazySandbox) -> None:
    shares = check_planpath(sandbox, 10)
    assert shares["bfs"] == 1.0


def test_sudoku_strategies_compute_what_they_say(sandbox: LazySandbox) -> None:
    shares = check_sudoku(sandbox, 10)
    assert shares["backtrack"] == 1.0


@pytest.mark.integration
def test_strategies_on_100_levels_each(sandbox: LazySandbox) -> None:
    planpath, sudoku = check_planpath(sandbox, 100), check_sudoku(sandbox, 100)
    assert planpath["bfs"] == 1.0 and sudoku["backtrack"] == 1.0
    flawed = {**planpath, **{f"sudoku {s}": v for s, v in sudoku.items()}}
    del flawed["bfs"], flawed["sudoku backtrack"]
    assert all(share < 1.0 for share in flawed.values()), flawed  # each flawed strategy fails somewhere


@pytest.mark.parametrize("task", ["planpath", "sudoku"])
def test_programs_are_plain_self_contained_and_short(task: str) -> None:
    pool = EnvPool(task, 3, **(DEMO_PLANPATH if task == "planpath" else {}))
    try:
        obs = pool.reset(np.arange(3), np.arange(3), "train").obs
    finally:
        pool.close()
    for o in obs:
        for s in strategies(task):
            program = strategy_program(task, o, s)
            assert program == strategy_program(task, o, s)  # a pure function of level and strategy
            tree = ast.parse(program)
            assert not any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(tree)), s
            names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
            assert not names & FORBIDDEN_NAMES, (s, names & FORBIDDEN_NAMES)
            assert "".join(o.split()) in "".join(program.split()).replace('","', "").replace(" ", ""), s
            assert len(program) < 800, (s, len(program))


def test_unknown_strategies_and_levels_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown Plan-Path strategy"):
        planpath_program("A.G", "astar")
    with pytest.raises(ValueError, match="not a Plan-Path observation"):
        planpath_program("...", "bfs")
    with pytest.raises(ValueError, match="not a 4x4 Sudoku"):
        sudoku_program(". 1 . 2", "backtrack")
    with pytest.raises(ValueError, match="no program strategies"):
        strategy_program("sokoban", "#", "bfs")


@pytest.mark.parametrize("task", ["planpath", "sudoku"])
def test_compact_programs_print_the_compact_templates_answer(sandbox: LazySandbox, task: str) -> None:
    """A compact program prints exactly what the compact templates' plan agent answers (the solver's
    answer in that format), so the plan agent, shown the output, answers by copying it; and the env
    reads it as it reads the paper form."""
    params = DEMO_PLANPATH if task == "planpath" else {"size": 4}
    n = 6
    pool = EnvPool(task, 2 * n, **params)
    seeds = np.arange(n) + 50
    pool.reset(np.arange(n), seeds, "train")
    obs = pool.render(np.arange(n))
    plans = pool.solve(np.arange(n)).plans
    correct = strategies(task)[0]
    compact = printed(sandbox, [strategy_program(task, o, correct, compact=True) for o in obs])
    paper = printed(sandbox, [strategy_program(task, o, correct) for o in obs])
    assert compact == [p.replace("####", "").replace(" ", "").strip() for p in plans]
    assert paper == [p.strip() for p in plans]
    assert all(simulate(pool, seeds, compact).success)
