"""Sudoku in pure Python, the same rules as `rust/envs/src/sudoku/` (user docs: `envs/sudoku/README.md`).

Mirror contract: for the same (config, seed, split) `SudokuRef.generate` makes the same random calls as
the Rust generator and so the same puzzle; for the same answers `step` gives the same boards, the same
rewards (the same f64 operations in the same order) and the same flags. The solver may search in any
order: it only answers order-independent questions (is there a solution; the solution of a puzzle that
has exactly one).

Grids are flat lists in row-major order; a cell holds 0 (empty) or a digit 1..=size; digit d is bit d-1.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .common import COMMON_KEYS, Common, Outcome
from .parse import MAX_ACTION_BYTES
from .rng import SplitMix64, split_of_level

DEFAULT_CLUES = {4: 6, 9: 30}
MIN_CLUES = {4: 4, 9: 17}
MAX_ATTEMPTS = 64
ANSWER_MARKER = b"####"
TRIPLES = "triples"
GRID = "grid"

_SPACE = frozenset(b" \t\n\r\x0b\x0c")
_BETWEEN_TRIPLES = _SPACE | frozenset(b",[]")
_INSIDE_TRIPLE = _SPACE | frozenset(b",)")
_GRID_SEPARATORS = _SPACE | frozenset(b",[]|-+")


@dataclass(frozen=True)
class SudokuRefConfig:
    """The task's own config keys; the same fields, defaults and checks as `SudokuConfig` in Rust."""

    size: int = 4
    """Side of the grid: 4 (2x2 boxes) or 9 (3x3 boxes)."""
    clues: int | None = None
    """Target number of givens: 4..=15 for 4x4, 17..=80 for 9x9; None: 6 for 4x4, 30 for 9x9."""

    def __post_init__(self) -> None:
        for name in ("size", "clues"):
            value = getattr(self, name)
            if value is None and name == "clues":
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"sudoku {name} must be an integer, got {value!r}")
        if self.size not in DEFAULT_CLUES:
            raise ValueError(f"invalid sudoku config: size must be 4 or 9, got {self.size}")
        low, high = MIN_CLUES[self.size], self.size * self.size - 1
        if not low <= self.target_clues <= high:
            raise ValueError(
                f"invalid sudoku config: clues must be in {low}..={high} for size {self.size}, got {self.target_clues}"
            )

    @property
    def target_clues(self) -> int:
        return DEFAULT_CLUES.get(self.size, 0) if self.clues is None else self.clues


class Geometry:
    def __init__(self, side: int) -> None:
        self.side = side
        self.cells = side * side
        self.full = (1 << side) - 1
        box = 2 if side == 4 else 3
        self.units = [(i // side, i % side, (i // side) // box * box + (i % side) // box) for i in range(self.cells)]


def is_complete_valid(geo: Geometry, grid: list[int]) -> bool:
    units = [[0] * geo.side for _ in range(3)]
    for cell in range(geo.cells):
        d = grid[cell]
        if d == 0 or d > geo.side:
            return False
        for kind, u in enumerate(geo.units[cell]):
            units[kind][u] |= 1 << (d - 1)
    return all(m == geo.full for kind in units for m in kind)


def render_grid(geo: Geometry, grid: list[int]) -> str:
    rows = (grid[r * geo.side : (r + 1) * geo.side] for r in range(geo.side))
    return "\n".join(" ".join(str(d) if d else "." for d in row) for row in rows)


# --- solver: bitmask units, most-constrained empty cell first --------------------------------------


class _Solver:
    def __init__(self, geo: Geometry, puzzle: list[int]) -> None:
        self.geo = geo
        self.rows = [0] * geo.side
        self.cols = [0] * geo.side
        self.boxes = [0] * geo.side
        self.grid = [0] * geo.cells
        self.allow = [geo.full] * geo.cells
        self.empties: list[int] = []
        self.ok = True
        for cell in range(geo.cells):
            d = puzzle[cell]
            if d == 0:
                self.empties.append(cell)
                continue
            r, c, b = geo.units[cell]
            m = 1 << (d - 1)
            if d > geo.side or (self.rows[r] | self.cols[c] | self.boxes[b]) & m:
                self.ok = False
                return
            self._set(cell, m)

    def _set(self, cell: int, m: int) -> None:
        r, c, b = self.geo.units[cell]
        self.rows[r] |= m
        self.cols[c] |= m
        self.boxes[b] |= m
        self.grid[cell] = m.bit_length()

    def _clear(self, cell: int, m: int) -> None:
        r, c, b = self.geo.units[cell]
        self.rows[r] &= ~m
        self.cols[c] &= ~m
        self.boxes[b] &= ~m
        self.grid[cell] = 0

    def _pick(self, k: int) -> int:
        best, best_mask, best_count = k, 0, 99
        for i in range(k, len(self.empties)):
            cell = self.empties[i]
            r, c, b = self.geo.units[cell]
            m = self.allow[cell] & ~(self.rows[r] | self.cols[c] | self.boxes[b])
            n = m.bit_count()
            if n < best_count:
                best, best_mask, best_count = i, m, n
                if n <= 1:
                    break
        self.empties[k], self.empties[best] = self.empties[best], self.empties[k]
        return best_mask

    def solve(self, k: int = 0) -> bool:
        if not self.ok:
            return False
        if k == len(self.empties):
            return True
        m = self._pick(k)
        cell = self.empties[k]
        while m:
            low = m & -m
            m ^= low
            self._set(cell, low)
            if self.solve(k + 1):
                return True
            self._clear(cell, low)
        return False

    def count(self, limit: int, k: int = 0) -> int:
        if not self.ok:
            return 0
        if k == len(self.empties):
            return 1
        m = self._pick(k)
        cell = self.empties[k]
        found = 0
        while m and found < limit:
            low = m & -m
            m ^= low
            self._set(cell, low)
            found += self.count(limit - found, k + 1)
            self._clear(cell, low)
        return found


def unique_solution(geo: Geometry, puzzle: list[int]) -> list[int] | None:
    solver = _Solver(geo, puzzle)
    if not solver.solve():
        return None
    return solver.grid if _Solver(geo, puzzle).count(2) == 1 else None


# --- generation (same random calls as rust/envs/src/sudoku/generate.rs) ----------------------------


def random_full_grid(geo: Geometry, rng: SplitMix64) -> list[int]:
    grid = [0] * geo.cells
    rows, cols, boxes = [0] * geo.side, [0] * geo.side, [0] * geo.side

    def fill(cell: int) -> bool:
        if cell == geo.cells:
            return True
        r, c, b = geo.units[cell]
        used = rows[r] | cols[c] | boxes[b]
        digits = [d for d in range(1, geo.side + 1) if not used & (1 << (d - 1))]
        rng.shuffle(digits)
        for d in digits:
            m = 1 << (d - 1)
            rows[r] |= m
            cols[c] |= m
            boxes[b] |= m
            grid[cell] = d
            if fill(cell + 1):
                return True
            rows[r] &= ~m
            cols[c] &= ~m
            boxes[b] &= ~m
        grid[cell] = 0
        return False

    fill(0)
    return grid


def remove_clues(geo: Geometry, solution: list[int], target: int, rng: SplitMix64) -> list[int]:
    order = list(range(geo.cells))
    rng.shuffle(order)
    puzzle = list(solution)
    count = geo.cells
    for cell in order:
        if count <= target:
            break
        puzzle[cell] = 0
        other = _Solver(geo, puzzle)
        other.allow[cell] &= ~(1 << (solution[cell] - 1))
        if other.solve():
            puzzle[cell] = solution[cell]
        else:
            count -= 1
    return puzzle


# --- answers (same rules as rust/envs/src/sudoku/answer.rs) ----------------------------------------


def answer_region(text: bytes) -> bytes:
    i = text.rfind(ANSWER_MARKER)
    return text if i < 0 else text[i + len(ANSWER_MARKER) :]


def _parse_triples(region: bytes, max_moves: int) -> list[tuple[int, int, int]] | None:
    out: list[tuple[int, int, int]] = []
    inside = False
    nums: list[int] = []
    cur: int | None = None
    for b in region:
        if not inside:
            if b == 0x28:  # (
                inside = True
                nums = []
            elif b not in _BETWEEN_TRIPLES:
                return None
            continue
        if 0x30 <= b <= 0x39:
            cur = min((cur or 0) * 10 + (b - 0x30), 255)
            continue
        if b not in _INSIDE_TRIPLE:
            return None
        if cur is not None:
            if len(nums) == 3:
                return None
            nums.append(cur)
            cur = None
        if b == 0x29:  # )
            if len(nums) != 3 or len(out) >= max_moves:
                return None
            out.append((nums[0], nums[1], nums[2]))
            inside = False
    return out if out and not inside else None


def _parse_grid(region: bytes, side: int) -> list[tuple[int, int, int]] | None:
    cells = side * side
    max_digit = 0x30 + side
    out: list[tuple[int, int, int]] = []
    for b in region:
        if b in (0x2E, 0x5F):  # . _
            v = 0
        elif 0x30 <= b <= max_digit:
            v = b - 0x30
        elif b in _GRID_SEPARATORS:
            continue
        else:
            return None
        i = len(out)
        if i == cells:
            return None
        out.append((i // side + 1, i % side + 1, v))
    return out if len(out) == cells else None


def parse_answer(text: bytes | None, side: int, max_moves: int) -> tuple[str, list[tuple[int, int, int]]] | None:
    """(mode, [(row, col, value)]) with 1-based row and column, or None when unparseable."""
    if text is None or len(text) > MAX_ACTION_BYTES:
        return None
    region = answer_region(text)
    if b"(" in region:
        triples = _parse_triples(region, max_moves)
        return None if triples is None else (TRIPLES, triples)
    cells = _parse_grid(region, side)
    return None if cells is None else (GRID, cells)


def format_grid(geo: Geometry, grid: list[int]) -> str:
    return "####\n" + render_grid(geo, grid)


# --- the task ---------------------------------------------------------------------------------------


class SudokuRef:
    """One Sudoku episode's state. The pool's bookkeeping lives in `common.ReferenceEpisode`."""

    def __init__(self, size: int, givens: list[int], board: list[int], solution: list[int]) -> None:
        self.geo = Geometry(size)
        self.givens = list(givens)
        self.board = list(board)
        self.solution = list(solution)
        self.empty_start = sum(1 for g in givens if g == 0)

    @classmethod
    def generate(cls, config: dict[str, Any], seed: int, split: str) -> "SudokuRef":
        """The puzzle for `seed` in `split`; common keys (max_steps, ...) in `config` are ignored here."""
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        cfg = SudokuRefConfig(**{k: v for k, v in config.items() if k not in COMMON_KEYS})
        geo = Geometry(cfg.size)
        rng = SplitMix64.for_level(seed, split)
        for _ in range(MAX_ATTEMPTS):
            solution = random_full_grid(geo, rng)
            if split_of_level(bytes(solution)) != split:
                continue
            puzzle = remove_clues(geo, solution, cfg.target_clues, rng)
            return cls(cfg.size, puzzle, puzzle, solution)
        raise RuntimeError(f"sudoku seed {seed}: no {split} grid in {MAX_ATTEMPTS} attempts")

    def is_solved(self) -> bool:
        """Complete, every unit valid, every given digit in place (rule "Sudoku givens are binding")."""
        kept = all(g == 0 or g == b for g, b in zip(self.givens, self.board))
        return kept and is_complete_valid(self.geo, self.board)

    def _correct(self) -> int:
        return sum(1 for g, b, s in zip(self.givens, self.board, self.solution) if g == 0 and b == s)

    def _assign(self, mode: str, row: int, col: int, value: int) -> bool:
        side = self.geo.side
        lowest = 0 if mode == GRID else 1
        if not (1 <= row <= side and 1 <= col <= side and lowest <= value <= side):
            return False
        cell = (row - 1) * side + (col - 1)
        given = self.givens[cell]
        if given:
            return value == given or (mode == GRID and value == 0)
        self.board[cell] = value
        return True

    def step(self, common: Common, action: bytes | None) -> Outcome:
        parsed = parse_answer(action, self.geo.side, common.max_moves)
        if parsed is None:
            return Outcome(local=common.parse_penalty, solved=False, failed=False, valid=False)
        mode, cells = parsed
        before = self._correct()
        local = 0.0
        valid = True
        for row, col, value in cells:
            if not self._assign(mode, row, col, value):
                local += common.invalid_move_penalty
                valid = False
        after = self._correct()
        local += (after - before) / self.empty_start
        return Outcome(local=local, solved=self.is_solved(), failed=False, valid=valid)

    def render(self) -> str:
        return render_grid(self.geo, self.board)

    def solve(self) -> str | None:
        """Runs the solver on the givens, like `Sudoku::solve`; stepping the answer solves the board."""
        solver = _Solver(self.geo, list(self.givens))
        if not solver.solve():
            return None
        return format_grid(self.geo, solver.grid)

    def optimal_len(self) -> int:
        return self.empty_start

    def encode(self) -> bytes:
        """The task part of a snapshot, byte for byte as `Sudoku::encode` writes it."""
        n = self.geo.cells
        mask = bytes(1 if g else 0 for g in self.givens)
        out = bytearray([self.geo.side])
        for part in (mask, bytes(self.board), bytes(self.solution)):
            out += struct.pack("<I", n) + part
        out.append(self.empty_start)
        return bytes(out)
