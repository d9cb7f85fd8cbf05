"""Sudoku: the pure-Python reference's rules, and the Rust pool (through `atgrpo.EnvPool`) against it.

Covers these rules of python/atgrpo/ALGORITHM.md: "Sudoku givens are binding" (a valid board that contradicts a
given is never solved; every puzzle has exactly one solution), "Truncation is failure" (the turn limit
is never success) and "Disjoint splits" (train and eval never overlap).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from pool_vs_reference import step_both

import atgrpo
from atgrpo import errors
from atgrpo.envs.reference import make_episode
from atgrpo.envs.reference.common import Common, Outcome
from atgrpo.envs.reference.parse import as_utf8
from atgrpo.envs.reference.rng import split_of_level
from atgrpo.envs.reference.sudoku import (
    GRID,
    MAX_ATTEMPTS,
    TRIPLES,
    SudokuRef,
    SudokuRefConfig,
    is_complete_valid,
    parse_answer,
)

# The same boards `golden_puzzles` in rust/envs/src/sudoku/tests.rs expects.
GOLDEN = {
    (4, 0, "train"): ". 1 . 2\n. 4 . .\n. 3 . 4\n. . 1 .",
    (4, 7, "eval"): ". 3 2 .\n1 . . .\n2 . . .\n3 . 4 .",
    (9, 1, "train"): "3 . . 5 . . 1 . .\n. . . 8 4 . . . .\n. . 2 . . 1 6 . 5\n1 8 5 . 3 . . . .\n"
    "7 2 . . . 5 . 3 9\n. 9 . . . . . . .\n4 . 8 . . . . . 7\n. 3 . 7 8 6 2 . .\n. 6 . . 5 . . . 8",
}


def naive_count(side: int, grid: list[int], limit: int = 2) -> int:
    """Plain row-major backtracking, independent of the reference's bitmask solver."""
    try:
        cell = grid.index(0)
    except ValueError:
        return 1
    r, c = divmod(cell, side)
    box = 2 if side == 4 else 3
    br, bc = r // box * box, c // box * box
    used = {grid[r * side + i] for i in range(side)} | {grid[i * side + c] for i in range(side)}
    used |= {grid[(br + i // box) * side + bc + i % box] for i in range(side)}
    total = 0
    for d in range(1, side + 1):
        if d in used:
            continue
        grid[cell] = d
        total += naive_count(side, grid, limit - total)
        grid[cell] = 0
        if total >= limit:
            break
    return total


def gen(size: int = 4, seed: int = 0, split: str = "train", **cfg: object) -> SudokuRef:
    return SudokuRef.generate({"size": size, **cfg}, seed, split)


def step(s: SudokuRef, text: str | bytes | None, common: Common | None = None) -> Outcome:
    return s.step(common or Common(), as_utf8(text))


def rc(s: SudokuRef, cell: int) -> tuple[int, int]:
    r, c = divmod(cell, s.geo.side)
    return r + 1, c + 1


# --- config -------------------------------------------------------------------------------------------


def test_config_defaults_and_ranges() -> None:
    assert SudokuRefConfig() == SudokuRefConfig(size=4, clues=None)
    assert SudokuRefConfig().target_clues == 6
    assert SudokuRefConfig(size=9).target_clues == 30
    for size, clues in [(4, 4), (4, 15), (9, 17), (9, 80)]:
        assert SudokuRefConfig(size=size, clues=clues).target_clues == clues
    for size, bad_clues in [(5, None), (16, None), (4, 3), (4, 16), (9, 16), (9, 81)]:
        with pytest.raises(ValueError, match="invalid sudoku config"):
            SudokuRefConfig(size=size, clues=bad_clues)
    for bad in [{"size": "4"}, {"size": 4.0}, {"clues": True}]:
        with pytest.raises(TypeError):
            SudokuRefConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SudokuRef.generate({"holes": 3}, 0, "train")
    with pytest.raises(ValueError):
        SudokuRef.generate({}, 0, "test")
    # Common keys are the episode's business and are ignored by the task.
    assert gen(max_steps=3, alpha=0.5).render() == gen().render()


# --- generation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(GOLDEN), ids=str)
def test_golden_puzzles(key: tuple[int, int, str]) -> None:
    size, seed, split = key
    assert gen(size, seed, split).render() == GOLDEN[key]


@pytest.mark.parametrize(("size", "clues", "seeds"), [(4, None, 150), (4, 4, 60), (9, None, 4), (9, 24, 2)])
def test_every_puzzle_has_exactly_one_solution(size: int, clues: int | None, seeds: int) -> None:
    for seed in range(seeds):
        for split in ("train", "eval"):
            s = gen(size, seed, split, clues=clues)
            assert is_complete_valid(s.geo, s.solution)
            assert split_of_level(bytes(s.solution)) == split
            assert all(g in (0, x) for g, x in zip(s.givens, s.solution))
            assert naive_count(size, list(s.givens)) == 1, (size, seed, split)
            target = SudokuRefConfig(size=size, clues=clues).target_clues
            assert s.geo.cells - s.optimal_len() >= target


def test_default_targets_are_reached() -> None:
    for size, seeds in [(4, 100), (9, 5)]:
        for seed in range(seeds):
            s = gen(size, seed)
            assert s.optimal_len() == s.geo.cells - SudokuRefConfig(size=size).target_clues


def test_train_and_eval_solutions_never_coincide() -> None:
    train = {tuple(gen(4, seed, "train").solution) for seed in range(200)}
    evaluation = {tuple(gen(4, seed, "eval").solution) for seed in range(200)}
    assert train.isdisjoint(evaluation)
    assert len(train) > 80 and len(evaluation) > 80
    assert MAX_ATTEMPTS == 64


# --- answers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("I fill two cells.\n#### [(1, 2, 3), (4,4,1)]\n", (TRIPLES, [(1, 2, 3), (4, 4, 1)])),
        ("(0 9 12345678901234567890)", (TRIPLES, [(0, 9, 255)])),
        ("#### (1,1,1)\n#### (2,2,2),\n(3,3,3)", (TRIPLES, [(2, 2, 2), (3, 3, 3)])),
        ("#### \n1 . 3 4\n3 4 _ 2\n0 0 0 0\n4 3 2 1\n", GRID),
        ("[[1,2,3,4],[3,4,1,2],[2,1,4,3],[4,3,2,1]]", GRID),
        ("1234|3412\n-----+----\n2143 4321", GRID),
    ],
)
def test_parse_accepts(text: str, want: object) -> None:
    got = parse_answer(text.encode(), 4, 8)
    assert got is not None
    if want == GRID:
        assert got[0] == GRID and len(got[1]) == 16
    else:
        assert got == want


@pytest.mark.parametrize(
    "text",
    [
        "",
        "####",
        "#### ()",
        "#### (1, 2)",
        "#### (1, 2, 3, 4)",
        "#### (1, 2, 3",
        "#### (1, 2, 3) done",
        "#### (1, -2, 3)",
        "#### ((1, 2, 3))",
        "#### (1; 2; 3)",
        "#### (r1, c2, 3)",
        "#### (1, 2, 3)\u00e9",
        "(1,1,1)" * 9,
        "1 2 3 4",
        "1234 3412 2143 432",
        "1234 3412 2143 43210",
        "1234 3412 2143 4325",
        "Answer: 1234 3412 2143 4321",
        "1234/3412/2143/4321",
        " " * (16 * 1024) + "####1234341221434321",
    ],
)
def test_parse_rejects(text: str) -> None:
    assert parse_answer(text.encode(), 4, 8) is None


def test_grid_cells_are_row_major_and_one_char_each() -> None:
    got = parse_answer(b"#### 1.34 34_2 0000 4321", 4, 1)  # max_moves only bounds triple lists
    assert got is not None and got[0] == GRID
    assert got[1][:3] == [(1, 1, 1), (1, 2, 0), (1, 3, 3)]
    assert got[1][15] == (4, 4, 1)
    assert parse_answer(b"5" * 81, 9, 8) is not None


# --- rules and rewards --------------------------------------------------------------------------------


def test_rewards_of_triples() -> None:
    s = gen(4, 11)
    e = s.optimal_len()
    empty = next(i for i, g in enumerate(s.givens) if g == 0)
    given = next(i for i, g in enumerate(s.givens) if g != 0)
    (er, ec), (gr, gc) = rc(s, empty), rc(s, given)
    right = s.solution[empty]
    wrong = right % 4 + 1
    g = s.givens[given]
    assert step(s, f"#### ({er}, {ec}, {right})") == Outcome(1.0 / e, False, False, True)
    assert step(s, f"({er},{ec},{wrong})") == Outcome(-1.0 / e, False, False, True)
    assert step(s, f"#### ({gr},{gc},{g})") == Outcome(0.0, False, False, True)
    out = step(s, f"#### ({gr},{gc},{g % 4 + 1}), ({er},{ec},{right})")
    assert out == Outcome(-0.05 + 1.0 / e, False, False, False)
    assert s.board[given] == g
    out = step(s, "#### (0,1,1) (1,5,1) (1,1,0) (1,1,5)")
    assert out == Outcome(-0.05 + -0.05 + -0.05 + -0.05, False, False, False)
    before = list(s.board)
    for bad in ["I think (1,1,1) works", None, b"\xff\xfe", "#### 1 2 3"]:
        assert step(s, bad) == Outcome(-0.5, False, False, False)
    assert s.board == before


def test_rewards_of_grids() -> None:
    s = gen(4, 5)
    e = s.optimal_len()
    assert step(s, "####\n" + "\n".join(" ".join(str(d) for d in s.givens[r * 4 : r * 4 + 4]) for r in range(4))) == (
        Outcome(0.0, False, False, True)
    )
    assert step(s, "#### " + " ".join("." * 16)) == Outcome(0.0, False, False, True)
    given = next(i for i, g in enumerate(s.givens) if g != 0)
    grid = list(s.solution)
    grid[given] = grid[given] % 4 + 1
    out = step(s, "#### " + "".join(map(str, grid)))
    assert out == Outcome(-0.05 + e / e, True, False, False)
    assert s.is_solved()
    # A grid answer clears cells written with 0.
    t = gen(4, 5)
    t.board = list(t.solution)
    out = step(t, "#### " + "".join(str(g) for g in t.givens))
    assert out == Outcome(-e / e, False, False, True)
    assert t.board == t.givens


def test_valid_board_contradicting_givens_is_never_solved() -> None:
    """python/atgrpo/ALGORITHM.md, rule "Sudoku givens are binding"."""
    for size in (4, 9):
        s = gen(size, 1)
        relabelled = [{1: 2, 2: 1}.get(d, d) for d in s.solution]
        assert is_complete_valid(s.geo, relabelled)
        assert any(g and g != x for g, x in zip(s.givens, relabelled))
        s.board = relabelled
        assert not s.is_solved()
        s.board = list(s.solution)
        assert s.is_solved()
        # Through `step`, the givens cannot even change: each contradicted given is an invalid move.
        t = gen(size, 1)
        out = step(t, "#### " + " ".join(map(str, relabelled)))
        assert not out.solved and not out.valid and not t.is_solved()


def test_solve_answer_solves_from_any_state() -> None:
    for size in (4, 9):
        s = gen(size, 3)
        empty = s.givens.index(0)
        s.board[empty] = s.solution[empty] % size + 1
        answer = s.solve()
        assert answer is not None and answer.startswith("####\n")
        out = step(s, answer)
        assert out.solved and out.valid and not out.failed
        assert out.local == s.optimal_len() / s.optimal_len()


def test_turn_limit_is_a_failure_never_success() -> None:
    """Rules "Truncation is failure" and "Disjoint splits", on the reference's episode bookkeeping."""
    ep = make_episode("sudoku", {"max_steps": 2}, 9)
    assert ep.step(as_utf8("#### (1,1,1)")).done is False
    rec = ep.step(as_utf8("#### (1,1,1)"))
    assert (rec.done, rec.success, rec.truncated, rec.reward_team) == (True, False, True, 0.0)
    ep = make_episode("sudoku", {"max_steps": 2}, 9)
    assert isinstance(ep.state, SudokuRef)
    rec = ep.step(as_utf8(ep.state.solve()))
    assert (rec.done, rec.success, rec.truncated, rec.reward) == (True, True, False, 2.0)


def test_encode_layout() -> None:
    s = gen(4, 2)
    blob = s.encode()
    assert len(blob) == 1 + 3 * (4 + 16) + 1
    assert blob[0] == 4 and struct.unpack("<I", blob[1:5]) == (16,)
    assert list(blob[5:21]) == [1 if g else 0 for g in s.givens]
    assert blob[-1] == s.optimal_len()


# --- the Rust pool against the reference (atgrpo.EnvPool) -------------------------------------------

SNAPSHOT_HEADER = 2 + 1 + 1 + 4 + 1  # magic, version, tag, steps, flags (rust/envs/src/pool.rs)


def actions_for(ref: SudokuRef) -> list[str | bytes | None]:
    side = ref.geo.side
    empties = [i for i, g in enumerate(ref.givens) if g == 0]
    given = next(i for i, g in enumerate(ref.givens) if g)
    (er, ec), (gr, gc) = rc(ref, empties[0]), rc(ref, given)
    half = list(ref.givens)
    for i in empties[: len(empties) // 2]:
        half[i] = ref.solution[i]
    return [
        "no idea",
        None,
        b"\xff not utf-8",
        f"#### ({er}, {ec}, {ref.solution[empties[0]]})",
        f"thinking (maybe)\n#### [({er},{ec},{ref.solution[empties[0]] % side + 1}), ({gr},{gc},{ref.givens[given]})]",
        f"#### ({gr},{gc},{ref.givens[given] % side + 1}) (0,1,1) ({side + 1},1,1) (1,1,{side + 1})",
        "#### " + " ".join(str(d) if d else "." for d in half),
        "#### " + "".join("0" for _ in range(side * side)),
    ]


@pytest.mark.parametrize(
    ("cfg", "seeds"), [({}, range(0, 40, 3)), ({"size": 9}, range(3)), ({"size": 9, "clues": 26}, [5])]
)
@pytest.mark.parametrize("split", ["train", "eval"])
def test_pool_matches_reference(cfg: dict, seeds: range, split: str) -> None:
    cfg = {**cfg, "max_steps": 12}
    for seed in seeds:
        pool = atgrpo.EnvPool("sudoku", 1, **cfg)
        obs = pool.reset([0], [seed], split).obs[0]
        ep = make_episode("sudoku", cfg, seed, split)
        state = ep.state
        assert isinstance(state, SudokuRef)
        assert obs == state.render()
        assert pool.solve([0]).optimal_len[0] == state.optimal_len()
        for act in [*actions_for(state), "SOLVE"]:
            if act == "SOLVE":
                act = pool.solve([0]).plans[0]
                assert act == state.solve()
            got, want, rec = step_both(pool, ep, act)
            assert got == want, (cfg, seed, split, act)
        assert rec.success and rec.done


def test_pool_puzzles_are_unique_and_match_golden() -> None:
    pool = atgrpo.EnvPool("sudoku", 64)
    obs = pool.reset(np.arange(64), np.arange(64), "eval").obs
    for text in obs:
        grid = [0 if ch == "." else int(ch) for ch in text.split()]
        assert naive_count(4, grid) == 1
    for (size, seed, split), board in GOLDEN.items():
        pool = atgrpo.EnvPool("sudoku", 1, size=size)
        assert pool.reset([0], [seed], split).obs[0] == board


def test_pool_solve_and_turn_limit() -> None:
    pool = atgrpo.EnvPool("sudoku", 2, max_steps=1, size=9)
    pool.reset([0, 1], [4, 4])
    sol = pool.solve([0, 1])
    assert list(sol.optimal_len) == [51, 51]
    out = pool.step([0, 1], [sol.plans[0], "#### (1,1,1)"])
    assert list(out.success) == [True, False]
    assert list(out.done) == [True, True]
    assert list(out.truncated) == [False, True], "hitting the turn limit is a failure, never success"
    assert out.reward[0] == 2.0


def test_pool_config_errors() -> None:
    assert atgrpo.EnvPool("sudoku", 1).config["size"] == 4
    bads: list[dict[str, object]] = [{"size": 5}, {"size": 9, "clues": 10}, {"clues": 16}, {"holes": 3}, {"size": "4"}]
    for bad in bads:
        with pytest.raises(errors.InvalidConfigError):
            atgrpo.EnvPool("sudoku", 1, **bad)


def test_pool_snapshot_is_reference_encoding_and_hostile_bytes_are_rejected() -> None:
    pool = atgrpo.EnvPool("sudoku", 2)
    pool.reset([0], [2])
    ref = gen(4, 2)
    pool.step([0], ["#### (1,1,1)"])
    step(ref, "#### (1,1,1)")
    blob = pool.snapshot([0])[0]
    assert blob[SNAPSHOT_HEADER:] == ref.encode()
    pool.restore([1], [blob])
    assert pool.render([1]) == [ref.render()]
    bad = bytearray(blob)
    mask = SNAPSHOT_HEADER + 5
    given = next(i for i, g in enumerate(ref.givens) if g)
    bad[mask + 16 + 4 + given] = ref.givens[given] % 4 + 1  # the board contradicts a given
    with pytest.raises(errors.SnapshotError):
        pool.restore([1], [bytes(bad)])
    with pytest.raises(errors.SnapshotError):
        atgrpo.EnvPool("sudoku", 1, size=9).restore([0], [blob])
